package agent

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/baton-kafka/baton/filter/pidmap"
	"github.com/baton-kafka/baton/internal/dirlock"
	"github.com/baton-kafka/baton/internal/journal"
)

// The state directory (StateDir): what a restarted agent must not forget.
// Today that is the destination producer id mappings (docs/design.md §9,
// "Restarts"): a client whose batches to the destination were outstanding
// when its agent was killed retries them through the agent started in its
// place, and the destination dedupes them only under the producer id and
// sequence the first send carried.

// Files in the state directory.
const (
	stateLockFile   = "agent.lock"
	producerIDsFile = "producer-ids.journal"
)

// agentState is an open state directory, held by this process alone.
type agentState struct {
	lock     *os.File
	pids     *pidJournal
	restored []pidmap.Mapping
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
		m, err := decodeMapping(rec)
		if err != nil {
			s.close()
			return nil, fmt.Errorf("agent: state dir: %s: record %d: %w", path, i, err)
		}
		s.restored = append(s.restored, m)
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
	j    *journal.Journal
	live func() []pidmap.Mapping // set once the filter exists, before serving

	mu        sync.Mutex
	compactAt int
	compacted atomic.Int64 // rewrites, for tests
}

var _ pidmap.Journal = (*pidJournal)(nil)

func compactAt(live int) int { return 2*live + 1024 }

// Record implements pidmap.Journal.
func (p *pidJournal) Record(m pidmap.Mapping) error {
	if err := p.j.Append(encodeMapping(m)); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.live != nil && p.j.Records() > p.compactAt {
		var n int
		err := p.j.Rewrite(func() [][]byte {
			ms := p.live()
			n = len(ms)
			recs := make([][]byte, len(ms))
			for i, m := range ms {
				recs[i] = encodeMapping(m)
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
