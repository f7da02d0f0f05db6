package agent

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/baton-kafka/baton/filter/pidmap"
	"github.com/baton-kafka/baton/internal/dirlock"
	"github.com/baton-kafka/baton/internal/journal"
)

// The state directory (StateDir): what a restarted agent must not forget.
// Today that is the destination producer id mappings (docs/design.md §9,
// "Restarts"): a client whose batches to the destination were outstanding
// when its agent was killed retries them through the agent started in its
// place, and the destination dedupes them only under the producer id and
// sequence the first send carried; and the uncertain batches, which a
// client bumping its epoch resends under a session no cluster can dedupe
// ("Resends under a new epoch").

// Files in the state directory.
const (
	stateLockFile   = "agent.lock"
	producerIDsFile = "producer-ids.journal"
)

// agentState is an open state directory, held by this process alone.
type agentState struct {
	lock              *os.File
	pids              *pidJournal
	restored          []pidmap.Mapping
	restoredUncertain []pidmap.Uncertain
}

// openState locks dir and reads back the mappings an earlier agent
// recorded there. A record that does not decode (a future format, a bad
// disk) fails the start, naming the file: the agent would otherwise go on
// without mappings it may need.
func openState(dir string) (*agentState, error) {
	lock, err := dirlock.Lock(dir, stateLockFile)
	if errors.Is(err, dirlock.ErrLocked) {
		return nil, fmt.Errorf("%w: state dir: %w; every agent needs a state directory of its own", ErrBadConfig, err)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: state dir: %w", ErrBadConfig, err)
	}
	path := filepath.Join(dir, producerIDsFile)
	j, recs, err := journal.Open(path)
	if err != nil {
		_ = lock.Close()
		return nil, fmt.Errorf("agent: state dir: %w", err)
	}
	s := &agentState{lock: lock, pids: &pidJournal{j: j, compactAt: compactAt(len(recs))}}
	for i, rec := range recs {
		var err error
		if len(rec) > 0 && rec[0] == uncertainV1 {
			var u pidmap.Uncertain
			if u, err = decodeUncertain(rec); err == nil {
				s.restoredUncertain = append(s.restoredUncertain, u)
			}
		} else {
			var m pidmap.Mapping
			if m, err = decodeMapping(rec); err == nil {
				s.restored = append(s.restored, m)
			}
		}
		if err != nil {
			s.close()
			return nil, fmt.Errorf("agent: state dir: %s: record %d: %w", path, i, err)
		}
	}
	return s, nil
}

func (s *agentState) close() {
	if s == nil {
		return
	}
	_ = s.pids.j.Close()
	_ = s.lock.Close() // releases the flock
}

// pidJournal is the pidmap.Journal on the state directory's journal file.
// It rewrites the file from the live mappings once it holds twice as many
// records as they are (mappings evicted from memory are never needed
// again), so the file stays in proportion to the producers the agent
// serves.
type pidJournal struct {
	j             *journal.Journal
	live          func() []pidmap.Mapping   // set once the filter exists, before serving
	liveUncertain func() []pidmap.Uncertain // likewise

	mu        sync.Mutex
	compactAt int
	compacted atomic.Int64 // rewrites, for tests
}

var _ pidmap.Journal = (*pidJournal)(nil)

func compactAt(live int) int { return 2*live + 1024 }

// Record implements pidmap.Journal.
func (p *pidJournal) Record(m pidmap.Mapping) error { return p.append(encodeMapping(m)) }

// RecordUncertain implements pidmap.Journal.
func (p *pidJournal) RecordUncertain(u pidmap.Uncertain) error { return p.append(encodeUncertain(u)) }

// append makes rec durable, then rewrites the file from what is live if
// it has grown past twice that.
func (p *pidJournal) append(rec []byte) error {
	if err := p.j.Append(rec); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.live != nil && p.j.Records() > p.compactAt {
		var n int
		err := p.j.Rewrite(func() [][]byte {
			ms := p.live()
			var us []pidmap.Uncertain
			if p.liveUncertain != nil {
				us = p.liveUncertain()
			}
			n = len(ms) + len(us)
			recs := make([][]byte, 0, n)
			for _, m := range ms {
				recs = append(recs, encodeMapping(m))
			}
			for _, u := range us {
				recs = append(recs, encodeUncertain(u))
			}
			return recs
		})
		if err == nil {
			p.compactAt = compactAt(n)
			p.compacted.Add(1)
		}
		// A failed rewrite leaves the old file, which holds everything:
		// it is tried again at the next new mapping.
	}
	return nil
}

// mappingV1 is the first byte of a mapping record in format 1: source id
// and epoch, destination id and epoch, partition, base sequence, then the
// topic's length and name.
const mappingV1 = 1

func encodeMapping(m pidmap.Mapping) []byte {
	b := make([]byte, 0, 1+8+2+8+2+4+4+2+len(m.Topic))
	b = append(b, mappingV1)
	b = binary.BigEndian.AppendUint64(b, uint64(m.Source.ID))
	b = binary.BigEndian.AppendUint16(b, uint16(m.Source.Epoch))
	b = binary.BigEndian.AppendUint64(b, uint64(m.Destination.ID))
	b = binary.BigEndian.AppendUint16(b, uint16(m.Destination.Epoch))
	b = binary.BigEndian.AppendUint32(b, uint32(m.Partition))
	b = binary.BigEndian.AppendUint32(b, uint32(m.Base))
	b = binary.BigEndian.AppendUint16(b, uint16(len(m.Topic)))
	return append(b, m.Topic...)
}

func decodeMapping(b []byte) (pidmap.Mapping, error) {
	const fixed = 1 + 8 + 2 + 8 + 2 + 4 + 4 + 2
	if len(b) < fixed || b[0] != mappingV1 {
		return pidmap.Mapping{}, fmt.Errorf("not a producer id mapping of format %d (%d bytes)", mappingV1, len(b))
	}
	var m pidmap.Mapping
	m.Source.ID = int64(binary.BigEndian.Uint64(b[1:]))
	m.Source.Epoch = int16(binary.BigEndian.Uint16(b[9:]))
	m.Destination.ID = int64(binary.BigEndian.Uint64(b[11:]))
	m.Destination.Epoch = int16(binary.BigEndian.Uint16(b[19:]))
	m.Partition = int32(binary.BigEndian.Uint32(b[21:]))
	m.Base = int32(binary.BigEndian.Uint32(b[25:]))
	n := int(binary.BigEndian.Uint16(b[29:]))
	if len(b) != fixed+n {
		return pidmap.Mapping{}, fmt.Errorf("producer id mapping: topic of %d bytes in a record of %d", n, len(b))
	}
	m.Topic = string(b[fixed:])
	return m, nil
}

// uncertainV1 is the first byte of an uncertain batch record in format 1:
// flags (1: it went to the destination), the time given up on (Unix ns),
// the fingerprint, the client's producer id, epoch, base sequence and
// record count, the partition, the producer id, epoch and sequence it was
// sent to the destination under, then the topic's length and name.
const uncertainV1 = 2

const uncertainFixed = 1 + 1 + 8 + 8 + 8 + 2 + 4 + 4 + 4 + 8 + 2 + 4 + 2

func encodeUncertain(u pidmap.Uncertain) []byte {
	b := make([]byte, 0, uncertainFixed+len(u.Batch.Topic))
	b = append(b, uncertainV1)
	var flags byte
	if u.ToDestination {
		flags = 1
	}
	b = append(b, flags)
	b = binary.BigEndian.AppendUint64(b, uint64(u.At.UnixNano()))
	b = binary.BigEndian.AppendUint64(b, u.Print)
	b = binary.BigEndian.AppendUint64(b, uint64(u.Batch.ProducerID))
	b = binary.BigEndian.AppendUint16(b, uint16(u.Batch.Epoch))
	b = binary.BigEndian.AppendUint32(b, uint32(u.Batch.Seq))
	b = binary.BigEndian.AppendUint32(b, uint32(u.Batch.Records))
	b = binary.BigEndian.AppendUint32(b, uint32(u.Batch.Partition))
	b = binary.BigEndian.AppendUint64(b, uint64(u.Sent.ProducerID))
	b = binary.BigEndian.AppendUint16(b, uint16(u.Sent.Epoch))
	b = binary.BigEndian.AppendUint32(b, uint32(u.Sent.Seq))
	b = binary.BigEndian.AppendUint16(b, uint16(len(u.Batch.Topic)))
	return append(b, u.Batch.Topic...)
}

func decodeUncertain(b []byte) (pidmap.Uncertain, error) {
	if len(b) < uncertainFixed || b[0] != uncertainV1 {
		return pidmap.Uncertain{}, fmt.Errorf("not an uncertain batch of format %d (%d bytes)", uncertainV1, len(b))
	}
	n := int(binary.BigEndian.Uint16(b[uncertainFixed-2:]))
	if len(b) != uncertainFixed+n {
		return pidmap.Uncertain{}, fmt.Errorf("uncertain batch: topic of %d bytes in a record of %d", n, len(b))
	}
	var u pidmap.Uncertain
	u.ToDestination = b[1]&1 != 0
	u.At = time.Unix(0, int64(binary.BigEndian.Uint64(b[2:])))
	u.Print = binary.BigEndian.Uint64(b[10:])
	u.Batch.ProducerID = int64(binary.BigEndian.Uint64(b[18:]))
	u.Batch.Epoch = int16(binary.BigEndian.Uint16(b[26:]))
	u.Batch.Seq = int32(binary.BigEndian.Uint32(b[28:]))
	u.Batch.Records = int32(binary.BigEndian.Uint32(b[32:]))
	u.Batch.Partition = int32(binary.BigEndian.Uint32(b[36:]))
	u.Batch.Topic = string(b[uncertainFixed:])
	if u.ToDestination {
		u.Sent = pidmap.Batch{Topic: u.Batch.Topic, Partition: u.Batch.Partition, Records: u.Batch.Records,
			ProducerID: int64(binary.BigEndian.Uint64(b[40:])), Epoch: int16(binary.BigEndian.Uint16(b[48:])),
			Seq: int32(binary.BigEndian.Uint32(b[50:]))}
	}
	return u, nil
}
