// Package agent wires one Orrery node together: its config, the services
// it runs (cluster membership and replication, discovery, samplers, the
// runner supervisor, the local and peer APIs) and their start and stop.
// The work itself lives in the packages it wires: instance (placement and
// routing), shard (model shards), supervisor (runners and the rank-link
// relay), tracecollect (trace shipping and merging), replica (the state
// store behind the cluster's replication), telemetry (samplers) and api.
package agent
