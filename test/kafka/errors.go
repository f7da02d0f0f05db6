package kafka

import "errors"

// Errors. Every message starts with "kafka: ".
var (
	// ErrBadOption is returned by Start when an option is out of range.
	ErrBadOption = errors.New("kafka: bad option")
	// ErrUnavailable means java, or Maven when the jars are not cached yet,
	// is not installed.
	ErrUnavailable = errors.New("kafka: java or maven not installed")
	// ErrNoCluster is returned by Open when a folder holds no running
	// cluster.
	ErrNoCluster = errors.New("kafka: no cluster in folder")
	// errPortInUse marks a start that failed because a port was taken;
	// Start tries again on other free ports if it picked them.
	errPortInUse = errors.New("kafka: port already in use")
)
