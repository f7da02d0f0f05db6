// Package journal owns an append-only file of records that a process makes
// durable before it acts on them, and reads back when it starts again: the
// memory a restart must not lose.
//
// A record is framed as its length and CRC-32C, so a write torn by a crash
// is recognised when the file is opened again and cut off: every record
// Append returned for is read back whole, and nothing after a torn one.
// Appends that arrive while one is being written share the next write and
// fsync (a group commit).
package journal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"sync"
)

// Sentinel errors. Every message starts with "journal: ".
var (
	// ErrClosed is returned by Append and Rewrite after Close.
	ErrClosed = errors.New("journal: closed")
	// ErrTooLarge refuses a record over MaxRecord bytes.
	ErrTooLarge = errors.New("journal: record too large")
)

// MaxRecord is the largest record Append takes.
const MaxRecord = 1 << 20

const frameHeader = 8 // length, CRC-32C

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Journal is one open journal file. Its methods are safe for concurrent use.
type Journal struct {
	path string

	// io serialises writes to f with Rewrite's swap of it.
	io sync.Mutex
	f  *os.File

	mu       sync.Mutex
	pending  *flush // records not yet written, nil when none
	flushing bool
	records  int // in the file, once pending is written
	closed   bool
}

// flush is one group of appends written and synced together.
type flush struct {
	buf  []byte
	done chan struct{}
	err  error
}

// Open opens (creating it if missing) the journal at path and returns the
// records it holds, oldest first. A torn record at the end (a crash
// mid-write) and anything after it is cut off the file.
func Open(path string) (*Journal, [][]byte, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, nil, fmt.Errorf("journal: %w", err)
	}
	data, err := io.ReadAll(f)
	if err != nil {
		_ = f.Close()
		return nil, nil, fmt.Errorf("journal: reading %s: %w", path, err)
	}
	recs, good := parse(data)
	if good < len(data) {
		if err := f.Truncate(int64(good)); err != nil {
			_ = f.Close()
			return nil, nil, fmt.Errorf("journal: cutting the torn end off %s: %w", path, err)
		}
	}
	if _, err := f.Seek(int64(good), io.SeekStart); err != nil {
		_ = f.Close()
		return nil, nil, fmt.Errorf("journal: %w", err)
	}
	return &Journal{path: path, f: f, records: len(recs)}, recs, nil
}

// parse returns the whole records in data and the length they take.
func parse(data []byte) ([][]byte, int) {
	var recs [][]byte
	at := 0
	for len(data)-at >= frameHeader {
		n := int(binary.BigEndian.Uint32(data[at:]))
		sum := binary.BigEndian.Uint32(data[at+4:])
		if n > MaxRecord || len(data)-at-frameHeader < n {
			break
		}
		rec := data[at+frameHeader : at+frameHeader+n]
		if crc32.Checksum(rec, castagnoli) != sum {
			break
		}
		recs = append(recs, rec)
		at += frameHeader + n
	}
	return recs, at
}

func frame(dst, rec []byte) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(rec)))
	dst = binary.BigEndian.AppendUint32(dst, crc32.Checksum(rec, castagnoli))
	return append(dst, rec...)
}

// Append writes rec and returns once it is durable (written and fsynced),
// or the error that kept it from being. A failed write is cut off the file,
// so the records after it are read back whole.
func (j *Journal) Append(rec []byte) error {
	if len(rec) > MaxRecord {
		return fmt.Errorf("%w: %d bytes, at most %d", ErrTooLarge, len(rec), MaxRecord)
	}
	j.mu.Lock()
	if j.closed {
		j.mu.Unlock()
		return ErrClosed
	}
	if j.pending == nil {
		j.pending = &flush{done: make(chan struct{})}
	}
	fl := j.pending
	fl.buf = frame(fl.buf, rec)
	j.records++
	lead := !j.flushing
	if lead {
		j.flushing = true
	}
	j.mu.Unlock()
	if lead {
		j.flushAll()
	}
	<-fl.done
	return fl.err
}

// flushAll writes pending groups until none is left; one appender at a
// time runs it.
func (j *Journal) flushAll() {
	for {
		j.mu.Lock()
		fl := j.pending
		j.pending = nil
		if fl == nil {
			j.flushing = false
			j.mu.Unlock()
			return
		}
		j.mu.Unlock()
		fl.err = j.write(fl.buf)
		if fl.err != nil {
			j.mu.Lock()
			j.records -= count(fl.buf)
			j.mu.Unlock()
		}
		close(fl.done)
	}
}

func count(buf []byte) int {
	recs, _ := parse(buf)
	return len(recs)
}

// write appends buf to the file and syncs it; on failure it cuts the file
// back to where it was.
func (j *Journal) write(buf []byte) error {
	j.io.Lock()
	defer j.io.Unlock()
	at, err := j.f.Seek(0, io.SeekEnd)
	if err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	if _, err = j.f.Write(buf); err == nil {
		err = j.f.Sync()
	}
	if err != nil {
		_ = j.f.Truncate(at) // a torn end would also be cut at the next Open
		return fmt.Errorf("journal: writing %s: %w", j.path, err)
	}
	return nil
}

// Records is how many records the file holds (with those being appended).
func (j *Journal) Records() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.records
}

// Rewrite replaces the file's records with what snapshot returns, atomically
// (a new file renamed over the old one): a crash leaves the old records or
// the new ones. snapshot is called once no append is being written, so
// anything an Append made durable before is either in it or, appended while
// Rewrite runs, written after it.
func (j *Journal) Rewrite(snapshot func() [][]byte) error {
	j.io.Lock()
	defer j.io.Unlock()
	j.mu.Lock()
	closed := j.closed
	j.mu.Unlock()
	if closed {
		return ErrClosed
	}
	recs := snapshot()
	var buf []byte
	for _, r := range recs {
		if len(r) > MaxRecord {
			return fmt.Errorf("%w: %d bytes, at most %d", ErrTooLarge, len(r), MaxRecord)
		}
		buf = frame(buf, r)
	}
	tmp := j.path + ".new"
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	if _, err = f.Write(buf); err == nil {
		err = f.Sync()
	}
	if err == nil {
		err = os.Rename(tmp, j.path)
	}
	if err == nil {
		err = syncDir(filepath.Dir(j.path))
	}
	if err != nil {
		_ = f.Close()
		_ = os.Remove(tmp)
		return fmt.Errorf("journal: rewriting %s: %w", j.path, err)
	}
	old := j.f
	j.f = f
	_ = old.Close()
	j.mu.Lock()
	j.records = len(recs)
	if j.pending != nil {
		j.records += count(j.pending.buf)
	}
	j.mu.Unlock()
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Close waits for appends being written and closes the file; later calls
// return ErrClosed.
func (j *Journal) Close() error {
	j.mu.Lock()
	if j.closed {
		j.mu.Unlock()
		return ErrClosed
	}
	j.closed = true
	j.mu.Unlock()
	j.io.Lock()
	defer j.io.Unlock()
	return j.f.Close()
}
