// Package ringbench is the cluster's link test: it passes a payload around
// every member over authenticated streams, so that each hop's latency and
// throughput can be seen. It rides on cluster.Node's streams: a control
// stream from the coordinator to each member carries the run's RingStart
// and the member's RingReport, and rank links carry the payload.
package ringbench
