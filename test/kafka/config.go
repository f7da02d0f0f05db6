package kafka

import (
	"fmt"
	"strconv"
	"strings"
)

// serverProperties is the one template of a node's server.properties
// (cluster.sh goes through the same code). Settings beyond listeners and
// KRaft wiring make small test clusters quick: internal topics sized to the
// node count, no initial rebalance delay, auto-created topics.
func serverProperties(cfg config, nodes []Node, nd Node) string {
	n := len(nodes)
	minISR := min(2, n)
	voters := make([]string, n)
	for i, o := range nodes {
		voters[i] = fmt.Sprintf("%d@127.0.0.1:%d", o.ID, o.ControllerPort)
	}
	kv := [][2]string{
		{"process.roles", "broker,controller"},
		{"node.id", strconv.Itoa(nd.ID)},
		{"controller.quorum.voters", strings.Join(voters, ",")},
		{"listeners", fmt.Sprintf("PLAINTEXT://127.0.0.1:%d,CONTROLLER://127.0.0.1:%d", nd.Port, nd.ControllerPort)},
		{"advertised.listeners", fmt.Sprintf("PLAINTEXT://127.0.0.1:%d", nd.Port)},
		{"listener.security.protocol.map", "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"},
		{"controller.listener.names", "CONTROLLER"},
		{"inter.broker.listener.name", "PLAINTEXT"},
		{"log.dirs", nd.Dir + "/data"},

		{"auto.create.topics.enable", "true"},
		{"num.partitions", strconv.Itoa(cfg.partitions)},
		{"default.replication.factor", strconv.Itoa(n)},
		{"group.initial.rebalance.delay.ms", "0"},
		{"offsets.topic.replication.factor", strconv.Itoa(n)},
		{"offsets.topic.num.partitions", "10"},
		{"transaction.state.log.replication.factor", strconv.Itoa(n)},
		{"transaction.state.log.min.isr", strconv.Itoa(minISR)},
		{"transaction.state.log.num.partitions", "10"},
		{"share.coordinator.state.topic.replication.factor", strconv.Itoa(n)},
		{"share.coordinator.state.topic.min.isr", strconv.Itoa(minISR)},
		{"num.network.threads", "2"},
		{"num.io.threads", "4"},
	}
	kv = append(kv, cfg.extra...)

	// Later keys win (BrokerConfig overrides); keep first-seen order.
	idx := map[string]int{}
	var out [][2]string
	for _, p := range kv {
		if i, ok := idx[p[0]]; ok {
			out[i][1] = p[1]
			continue
		}
		idx[p[0]] = len(out)
		out = append(out, p)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# Written by github.com/baton-kafka/baton/test/kafka for node %d of %d.\n", nd.ID, n)
	for _, p := range out {
		fmt.Fprintf(&b, "%s=%s\n", p[0], escapeProp(p[1]))
	}
	return b.String()
}

// escapeProp escapes a java.util.Properties value: backslashes, line
// breaks (a PEM certificate or key given inline, ssl.keystore.key) and a
// leading space.
func escapeProp(v string) string {
	r := strings.NewReplacer(`\`, `\\`, "\n", `\n`, "\r", `\r`)
	v = r.Replace(v)
	if strings.HasPrefix(v, " ") {
		v = `\` + v
	}
	return v
}

// log4jConfig sends every node's log to its stdout (redirected to
// node-<id>/server.log) and quietens the config dumps.
const log4jConfig = `# Written by github.com/baton-kafka/baton/test/kafka.
status = warn
appender.out.type = Console
appender.out.name = STDOUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.out.ref = STDOUT
logger.config.name = kafka.server.KafkaConfig
logger.config.level = warn
logger.clientconfig.name = org.apache.kafka.clients
logger.clientconfig.level = warn
logger.common.name = org.apache.kafka.common.config
logger.common.level = warn
`
