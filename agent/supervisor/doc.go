// Package supervisor runs this node's model runners as child processes
// (`orrery runner`), one per instance rank placed here, so that a crash
// in native code takes down a runner and never the agent.
//
// It reconciles the replicated state with the processes: an instance on
// this node gets a runner; a deleted one is stopped. Each runner's
// lifecycle (Idle, Loading with layers loaded, Ready, Running, Failed with
// the error, Shutdown) is published as RunnerStatusChanged events. A
// runner that dies is marked Failed and started again after a backoff;
// requests wait (bounded) for it to be Ready again.
package supervisor
