package replicator_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/baton-kafka/baton/internal/wait"
	"github.com/baton-kafka/baton/replicator"
)

// dynamicTopicConfigs returns the configs set on topic itself.
func dynamicTopicConfigs(t *testing.T, adm *kadm.Client, topic string) map[string]string {
	t.Helper()
	rcs, err := adm.DescribeTopicConfigs(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := rcs.On(topic, nil)
	if err == nil {
		err = rc.Err
	}
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, c := range rc.Configs {
		if c.Source == kmsg.ConfigSourceDynamicTopicConfig && c.Value != nil {
			out[c.Key] = *c.Value
		}
	}
	return out
}

func alterTopic(t *testing.T, adm *kadm.Client, topic string, alters ...kadm.AlterConfig) {
	t.Helper()
	resps, err := adm.AlterTopicConfigs(context.Background(), alters, topic)
	if err == nil {
		var resp kadm.AlterConfigsResponse
		if resp, err = resps.On(topic, nil); err == nil {
			err = resp.Err
		}
	}
	if err != nil {
		t.Fatal(err)
	}
}

func waitConfig(t *testing.T, adm *kadm.Client, topic, key, want string, present bool) {
	t.Helper()
	wait.For(t, 30*time.Second, fmt.Sprintf("destination %s %s = %q (set %v)", topic, key, want, present), func() string {
		if v, ok := dynamicTopicConfigs(t, adm, topic)[key]; ok != present || (present && v != want) {
			return fmt.Sprintf("%q (set %v)", v, ok)
		}
		return ""
	})
}

func counterSum(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if want, ok := labels[lp.GetName()]; ok && want != lp.GetValue() {
					continue metric
				}
			}
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

// waitConfigChanges waits until the replicator has counted want config
// changes of kind op on topic, and fails if it counted more. The count
// follows the destination's alter response, so a test that sees the new
// value on D can look before the replicator has counted it.
func waitConfigChanges(t *testing.T, reg *prometheus.Registry, topic, op string, want float64) {
	t.Helper()
	labels := map[string]string{"topic": topic, "op": op}
	wait.For(t, 30*time.Second, fmt.Sprintf("%v config changes (%s) of %s counted", want, op, topic), func() string {
		if got := counterSum(t, reg, "baton_replicator_topic_config_changes_total", labels); got < want {
			return fmt.Sprintf("%v", got)
		}
		return ""
	})
	if got := counterSum(t, reg, "baton_replicator_topic_config_changes_total", labels); got != want {
		t.Errorf("config changes (%s) of %s = %v, want %v", op, topic, got, want)
	}
}

// TestTopicConfigMirrored: retention.ms changed on S (set, changed,
// removed) follows on D while the topic is replicated; a config the
// replicator controls (min.insync.replicas) is not copied.
func TestTopicConfigMirrored(t *testing.T) {
	t.Parallel()
	src, dst := startPair(t)
	sAdm, dAdm := admin(t, src), admin(t, dst)
	ctx := context.Background()
	resp, err := sAdm.CreateTopic(ctx, 3, 3, map[string]*string{
		"retention.ms": kadm.StringPtr("3600000"), "min.insync.replicas": kadm.StringPtr("2"),
	}, "cfg")
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatal(err)
	}
	produceMatrix(t, src, "cfg", 1000)

	reg := prometheus.NewRegistry()
	rn := run(t, src, dst, replicator.Topics("cfg"), replicator.ConfigSyncInterval(100*time.Millisecond), replicator.Registry(reg))
	defer rn.stop(t)
	waitCaughtUp(t, rn, src, "cfg")
	waitConfig(t, dAdm, "cfg", "retention.ms", "3600000", true) // copied at creation
	if v, ok := dynamicTopicConfigs(t, dAdm, "cfg")["min.insync.replicas"]; ok {
		t.Errorf("min.insync.replicas=%s copied to the destination", v)
	}

	alterTopic(t, sAdm, "cfg", kadm.AlterConfig{Op: kadm.SetConfig, Name: "retention.ms", Value: kadm.StringPtr("7200000")},
		kadm.AlterConfig{Op: kadm.SetConfig, Name: "min.insync.replicas", Value: kadm.StringPtr("3")})
	waitConfig(t, dAdm, "cfg", "retention.ms", "7200000", true)
	waitConfigChanges(t, reg, "cfg", "set", 1)

	alterTopic(t, sAdm, "cfg", kadm.AlterConfig{Op: kadm.DeleteConfig, Name: "retention.ms"})
	waitConfig(t, dAdm, "cfg", "retention.ms", "", false)
	waitConfigChanges(t, reg, "cfg", "delete", 1)
	if v, ok := dynamicTopicConfigs(t, dAdm, "cfg")["min.insync.replicas"]; ok {
		t.Errorf("min.insync.replicas=%s copied to the destination", v)
	}
	requireParity(t, src, dst, "cfg", replicator.ParityExact, 1000)
}
