// Package controlplane will own the per-topic state machine, the cutover
// orchestrator, leases, the etcd store and the event log. Nothing is built
// here yet: the control-plane issue brings it.
package controlplane
