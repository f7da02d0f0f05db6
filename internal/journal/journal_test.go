package journal

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

func open(t *testing.T, path string) (*Journal, [][]byte) {
	t.Helper()
	j, recs, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	return j, recs
}

func want(t *testing.T, got [][]byte, want ...string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d records %q, want %q", len(got), got, want)
	}
	for i := range want {
		if string(got[i]) != want[i] {
			t.Fatalf("record %d: %q, want %q", i, got[i], want[i])
		}
	}
}

func TestAppendedRecordsAreReadBack(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "j")
	j, recs := open(t, path)
	want(t, recs)
	for _, r := range []string{"a", "", "ccc"} {
		if err := j.Append([]byte(r)); err != nil {
			t.Fatal(err)
		}
	}
	if n := j.Records(); n != 3 {
		t.Fatalf("Records %d, want 3", n)
	}
	j.Close()
	j, recs = open(t, path)
	defer j.Close()
	want(t, recs, "a", "", "ccc")
	if err := j.Append([]byte("d")); err != nil {
		t.Fatal(err)
	}
	j.Close()
	_, recs = open(t, path)
	want(t, recs, "a", "", "ccc", "d")
}

// A crash mid-write leaves a torn record at the end: it and anything after
// it are cut off, and appends go on from the last whole record.
func TestTornEndIsCutOff(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		tear func([]byte) []byte
	}{
		{"half a header", func(b []byte) []byte { return append(b, 0, 0, 0) }},
		{"an impossible length", func(b []byte) []byte { return append(b, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 1) }},
		{"a payload cut short", func(b []byte) []byte { return append(b, frame(nil, []byte("lost record"))[:12]...) }},
		{"a bad checksum", func(b []byte) []byte {
			f := frame(nil, []byte("flipped"))
			f[len(f)-1] ^= 1
			return append(b, f...)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "j")
			good := frame(frame(nil, []byte("one")), []byte("two"))
			data := tc.tear(append([]byte(nil), good...))
			if err := os.WriteFile(path, data, 0o600); err != nil {
				t.Fatal(err)
			}
			j, recs := open(t, path)
			want(t, recs, "one", "two")
			if err := j.Append([]byte("three")); err != nil {
				t.Fatal(err)
			}
			j.Close()
			_, recs = open(t, path)
			want(t, recs, "one", "two", "three")
		})
	}
}

// Concurrent appends are all durable when they return, each whole.
func TestConcurrentAppends(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "j")
	j, _ := open(t, path)
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := j.Append([]byte(fmt.Sprint("rec ", i))); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	j.Close()
	_, recs := open(t, path)
	seen := map[string]bool{}
	for _, r := range recs {
		seen[string(r)] = true
	}
	for i := range 64 {
		if !seen[fmt.Sprint("rec ", i)] {
			t.Errorf("rec %d lost", i)
		}
	}
	if len(recs) != 64 {
		t.Errorf("%d records, want 64", len(recs))
	}
}

func TestRewriteReplacesTheRecords(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "j")
	j, _ := open(t, path)
	for _, r := range []string{"a", "b", "c"} {
		if err := j.Append([]byte(r)); err != nil {
			t.Fatal(err)
		}
	}
	if err := j.Rewrite(func() [][]byte { return [][]byte{[]byte("c")} }); err != nil {
		t.Fatal(err)
	}
	if n := j.Records(); n != 1 {
		t.Fatalf("Records %d after the rewrite, want 1", n)
	}
	if err := j.Append([]byte("d")); err != nil {
		t.Fatal(err)
	}
	j.Close()
	_, recs := open(t, path)
	want(t, recs, "c", "d")
	if _, err := os.Stat(path + ".new"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the rewrite's temporary file is left: %v", err)
	}
}

func TestClosedAndTooLarge(t *testing.T) {
	t.Parallel()
	j, _ := open(t, filepath.Join(t.TempDir(), "j"))
	if err := j.Append(bytes.Repeat([]byte{1}, MaxRecord+1)); !errors.Is(err, ErrTooLarge) {
		t.Errorf("a record over MaxRecord: %v, want ErrTooLarge", err)
	}
	j.Close()
	if err := j.Append([]byte("x")); !errors.Is(err, ErrClosed) {
		t.Errorf("Append after Close: %v, want ErrClosed", err)
	}
	if err := j.Rewrite(func() [][]byte { return nil }); !errors.Is(err, ErrClosed) {
		t.Errorf("Rewrite after Close: %v, want ErrClosed", err)
	}
}
