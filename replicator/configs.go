package replicator

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// DefaultConfigSyncInterval is how often Run mirrors topic config changes.
const DefaultConfigSyncInterval = 5 * time.Second

// ConfigSyncInterval sets how often Run mirrors changes of S.T's dynamic
// topic configs to D.T, overriding 5 s. 0 disables the mirroring (D.T is
// still created with S.T's configs).
func ConfigSyncInterval(d time.Duration) Opt {
	return optFunc(func(c *config) { c.configSyncInterval = d })
}

// controlledConfigs are topic configs never copied from S to D, neither at
// creation nor later: they name S's brokers, depend on D's replication
// factor, or would make D refuse copied batches.
var controlledConfigs = map[string]string{
	"leader.replication.throttled.replicas":   "names the source's broker ids",
	"follower.replication.throttled.replicas": "names the source's broker ids",
	"min.insync.replicas":                     "depends on the destination's replication factor (acks=all copies)",
	"message.timestamp.difference.max.ms":     "would make the destination refuse old copied batches",
	"message.timestamp.before.max.ms":         "would make the destination refuse old copied batches",
	"message.timestamp.after.max.ms":          "would make the destination refuse copied batches",
}

// mirrored reports whether topic config key is copied from S to D.
func mirrored(key string) bool { _, ok := controlledConfigs[key]; return !ok }

// dynamicConfigs returns the dynamic (set on the topic) configs of one
// described topic that the replicator copies. Sensitive values (nil) are
// left out.
func dynamicConfigs(rc kadm.ResourceConfig) map[string]string {
	out := map[string]string{}
	for _, c := range rc.Configs {
		if c.Source == kmsg.ConfigSourceDynamicTopicConfig && c.Value != nil && mirrored(c.Key) {
			out[c.Key] = *c.Value
		}
	}
	return out
}

// ConfigChange is one topic config change applied to D.T.
type ConfigChange struct {
	Topic string
	Key   string
	// Old is D's dynamic value before ("" and HadOld false when unset).
	Old    string
	HadOld bool
	// New is the value set; Deleted when S no longer sets the key and it
	// was removed from D.T (D's default applies again).
	New     string
	Deleted bool
}

// configDiff returns the changes that make D.T's dynamic configs follow
// S.T's. prev is S's dynamic configs at the previous pass (nil on the
// first): a key that was set on S then and is gone now is deleted on D.
// Keys D sets on its own, never set on S, are left alone.
func configDiff(topic string, src, dst, prev map[string]string) []ConfigChange {
	var out []ConfigChange
	for k, v := range src {
		if old, ok := dst[k]; !ok || old != v {
			out = append(out, ConfigChange{Topic: topic, Key: k, Old: old, HadOld: ok, New: v})
		}
	}
	for k := range prev {
		if _, still := src[k]; still {
			continue
		}
		if old, ok := dst[k]; ok {
			out = append(out, ConfigChange{Topic: topic, Key: k, Old: old, HadOld: true, Deleted: true})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// SyncConfigs mirrors S's dynamic topic config changes to D once, for every
// managed topic whose destination is set up, and returns the changes
// applied. Run calls it every ConfigSyncInterval.
func (r *Replicator) SyncConfigs(ctx context.Context) ([]ConfigChange, error) {
	r.mu.Lock()
	srcAdm, dstAdm := r.srcAdm, r.dstAdm
	var names []string
	for name, t := range r.topics {
		if t.ready {
			names = append(names, name)
		}
	}
	r.mu.Unlock()
	if srcAdm == nil || dstAdm == nil {
		return nil, ErrNotRunning
	}
	if len(names) == 0 {
		return nil, nil
	}
	sort.Strings(names)
	ctx, cancel := context.WithTimeout(ctx, r.cfg.requestTimeout)
	defer cancel()
	srcs, err := srcAdm.DescribeTopicConfigs(ctx, names...)
	if err != nil {
		return nil, fmt.Errorf("source topic configs: %w", err)
	}
	dsts, err := dstAdm.DescribeTopicConfigs(ctx, names...)
	if err != nil {
		return nil, fmt.Errorf("destination topic configs: %w", err)
	}
	var changes []ConfigChange
	var errs []error
	for _, name := range names {
		s, err := srcs.On(name, nil)
		if err == nil {
			err = s.Err
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("source configs of %s: %w", name, err))
			continue
		}
		d, err := dsts.On(name, nil)
		if err == nil {
			err = d.Err
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("destination configs of %s: %w", name, err))
			continue
		}
		src := dynamicConfigs(s)
		r.configMu.Lock()
		prev := r.lastSrcConfigs[name]
		r.configMu.Unlock()
		diff := configDiff(name, src, dynamicConfigs(d), prev)
		if len(diff) > 0 {
			alters := make([]kadm.AlterConfig, 0, len(diff))
			for _, c := range diff {
				if c.Deleted {
					alters = append(alters, kadm.AlterConfig{Op: kadm.DeleteConfig, Name: c.Key})
				} else {
					v := c.New
					alters = append(alters, kadm.AlterConfig{Op: kadm.SetConfig, Name: c.Key, Value: &v})
				}
			}
			resps, err := dstAdm.AlterTopicConfigs(ctx, alters, name)
			if err == nil {
				var resp kadm.AlterConfigsResponse
				if resp, err = resps.On(name, nil); err == nil {
					err = resp.Err
				}
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("altering configs of %s on the destination: %w", name, err))
				r.metrics.errors.WithLabelValues(name, "config_sync").Inc()
				continue // prev stays: the next pass tries again
			}
			for _, c := range diff {
				op := "set"
				if c.Deleted {
					op = "delete"
				}
				r.metrics.configChanges.WithLabelValues(name, op).Inc()
				r.log.Info("topic config mirrored to the destination", "topic", name, "key", c.Key, "op", op,
					"old", c.Old, "had_old", c.HadOld, "new", c.New)
			}
			changes = append(changes, diff...)
		}
		r.configMu.Lock()
		r.lastSrcConfigs[name] = src
		r.configMu.Unlock()
	}
	return changes, errors.Join(errs...)
}

// configSyncer runs SyncConfigs every interval until ctx ends.
func (r *Replicator) configSyncer(ctx context.Context, interval time.Duration) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if _, err := r.SyncConfigs(ctx); err != nil && ctx.Err() == nil {
			r.log.Warn("topic config sync", "err", err)
		}
	}
}
