// Package e2e holds Baton's end-to-end acceptance tests of the agent's data
// path (go test ./test/e2e/): every client of the matrix (test/clients)
// producing through an in-process agent to a real three-broker Apache Kafka
// cluster and to a three-broker kfake cluster, with records checked where
// each client was told they are and record batch CRCs checked byte-for-byte
// between what the client sent and what the source stored; partition
// leaders moving under running producers; and consumers, admin clients and
// kcat reading through the agent.
//
// The package has no API: everything is in its _test.go files.
package e2e
