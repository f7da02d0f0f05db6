// Package replicas owns running the control plane as replicas on one etcd
// (docs/design.md §13.1): the leader election (Campaign, Status), the
// followers that serve routes and leases from the state in etcd while
// another replica leads (Follower), the leader's watch of the agent
// records followers write (Records), and one process's lifecycle from
// follower to leader to its stop (Lifecycle, `baton controlplane`).
//
// It imports package controlplane and drives a ControlPlane from outside:
// the store's keys and the leader's agent table stay there, reached
// through EtcdStore's methods and ControlPlane.MergeRecords. Both the
// leader and a follower grant leases by cutover.GrantLease.
package replicas

import "errors"

// Errors.
var (
	// errFollowerStopped: Run returned; this replica grants nothing more
	// as a follower.
	errFollowerStopped = errors.New("replicas: this replica stopped following (it leads now, or stops)")
)
