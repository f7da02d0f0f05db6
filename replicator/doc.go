// Package replicator will own the source-to-destination copy with offset
// parity, group offset sync, time-lag accounting and priority scheduling.
// Nothing is built here yet: the replicator issue brings it.
package replicator
