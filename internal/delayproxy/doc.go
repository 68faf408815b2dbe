// Package delayproxy is a TCP proxy that holds every chunk it forwards
// for a fixed delay, each way: added latency without netem (which this
// kernel lacks), for the tests and for tp-bench's choice between plans.
package delayproxy
