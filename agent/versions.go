package agent

import (
	"github.com/twmb/franz-go/pkg/kmsg"
)

// agentKeys are the requests the agent serves, with the highest version it
// serves of each. Requests stop below the version that names topics by id
// (Produce and Fetch v13, OffsetCommit and OffsetFetch v10, ...): ids
// differ between the two clusters, and the agent reports its own (topicID).
var agentKeys = map[int16]int16{
	0:  12,  // Produce
	1:  12,  // Fetch
	2:  127, // ListOffsets
	3:  12,  // Metadata (v13 only adds a top-level error)
	8:  9,   // OffsetCommit (v10 names topics by id)
	9:  9,   // OffsetFetch (v10 names topics by id)
	10: 127, // FindCoordinator
	11: 127, // JoinGroup
	12: 127, // Heartbeat
	13: 127, // LeaveGroup
	14: 127, // SyncGroup
	15: 127, // DescribeGroups
	18: 127, // ApiVersions
	19: 127, // CreateTopics
	20: 5,   // DeleteTopics (v6 may name topics by id)
	22: 127, // InitProducerId
	23: 127, // OffsetForLeaderEpoch
	24: 3,   // AddPartitionsToTxn (v4+ is broker to broker)
	25: 127, // AddOffsetsToTxn
	26: 127, // EndTxn
	28: 5,   // TxnOffsetCommit (v6 names topics by id)
	29: 127, // DescribeAcls
	30: 127, // CreateAcls
	31: 127, // DeleteAcls
	32: 127, // DescribeConfigs
	33: 127, // AlterConfigs
	37: 127, // CreatePartitions
	42: 127, // DeleteGroups
	44: 127, // IncrementalAlterConfigs
	47: 127, // OffsetDelete
	60: 127, // DescribeCluster
}

// versionRange is what the agent advertises for one key.
type versionRange struct{ min, max int16 }

// advertised is the intersection of what the agent serves and what both
// clusters support (only the source's while the destination is unknown).
// It is computed once per change of what the clusters told us.
func (a *Agent) advertised() map[int16]versionRange {
	src, dst := a.src.VersionsSeen(), a.dst.VersionsSeen()
	if c := a.advCache.Load(); c != nil && c.src == src && c.dst == dst {
		return c.keys
	}
	keys := a.computeAdvertised()
	a.advCache.Store(&advertisedCache{src: src, dst: dst, keys: keys})
	return keys
}

type advertisedCache struct {
	src, dst uint64
	keys     map[int16]versionRange
}

func (a *Agent) computeAdvertised() map[int16]versionRange {
	out := make(map[int16]versionRange, len(agentKeys))
	srcV, dstV := a.src.Versions(), a.dst.Versions()
	for key, cap := range agentKeys {
		req := kmsg.RequestForKey(key)
		if req == nil {
			continue
		}
		r := versionRange{0, min(cap, req.MaxVersion())}
		for _, vs := range []map[int16][2]int16{srcV, dstV} {
			if vs == nil {
				continue
			}
			b, ok := vs[key]
			if !ok {
				r.max = -1
				break
			}
			r.min = max(r.min, b[0])
			r.max = min(r.max, b[1])
		}
		if srcV != nil && r.min <= r.max {
			out[key] = r
		}
	}
	if srcV != nil && a.auth != nil {
		// The agent answers the client's SASL itself (filter/sasl),
		// serving handshake v1 only, so that authentication goes in
		// SaslAuthenticate requests, never as raw frames. It advertises
		// v0 to v1 all the same, as Kafka does: librdkafka uses SASL
		// only when the range holds v0, and then sends v1 (SaslAuthenticate
		// is advertised); a client that sent v0 is refused.
		out[17] = versionRange{0, 1}
		out[36] = versionRange{0, 2}
	}
	return out
}

// advertises says whether a client may send key at version.
func (a *Agent) advertises(key, version int16) bool {
	if key == 18 {
		return true // always answerable, to tell a client what we serve
	}
	r, ok := a.advertised()[key]
	return ok && version >= r.min && version <= r.max
}

func (a *Agent) apiVersionsResponse(version int16, errCode int16) kmsg.Response {
	resp := kmsg.NewPtrApiVersionsResponse()
	resp.SetVersion(version)
	resp.ErrorCode = errCode
	for key, r := range a.advertised() {
		k := kmsg.NewApiVersionsResponseApiKey()
		k.ApiKey, k.MinVersion, k.MaxVersion = key, r.min, r.max
		resp.ApiKeys = append(resp.ApiKeys, k)
	}
	sortKeys(resp.ApiKeys)
	// Clients read finalized features (transaction.version) from here;
	// report the source's, which is where writes go until cutover.
	if f := a.src.Features(); f != nil {
		resp.SupportedFeatures = f.SupportedFeatures
		resp.FinalizedFeaturesEpoch = f.FinalizedFeaturesEpoch
		resp.FinalizedFeatures = f.FinalizedFeatures
	}
	return resp
}

func sortKeys(ks []kmsg.ApiVersionsResponseApiKey) {
	for i := 1; i < len(ks); i++ {
		for j := i; j > 0 && ks[j].ApiKey < ks[j-1].ApiKey; j-- {
			ks[j], ks[j-1] = ks[j-1], ks[j]
		}
	}
}
