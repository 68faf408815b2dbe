// Package supervisor runs this node's model runners as child processes
// (`orrery runner`), one per instance rank placed here, so that a crash
// in native code takes down a runner and never the agent.
//
// It reconciles the replicated state with the processes: each rank of an
// instance placed on this node gets a runner (after its model file or
// shard is at hand); a deleted or failed instance's runners are stopped.
// Each runner's lifecycle (Idle, Loading with layers loaded and any shard
// transfer, Connecting its rank links, Ready, Running, Failed with the
// error, Shutdown) is published as RunnerStatusChanged events. A runner
// that dies stays Failed: the agent then replaces its instance as a whole.
package supervisor
