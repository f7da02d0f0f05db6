// Package framing owns the Kafka wire framing of the agent: reading
// size-prefixed frames (a client's requests within the agent's buffer
// budget and deadlines, see Reader; a broker's responses whole, see
// ReadFrame), splitting a request frame into header and body, and encoding
// request headers. Frames it returns are pooled buffers (package bufpool).
package framing

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/baton-kafka/baton/filter"
	"github.com/baton-kafka/baton/internal/bufpool"
)

// ReadFrame reads one size-prefixed frame of at most max bytes into a
// pooled buffer, which the caller MUST bufpool.Put when done. It allocates
// the declared size at once, so it is only for upstream brokers'
// responses; client requests go through a Reader.
func ReadFrame(r io.Reader, max int32) ([]byte, error) {
	var sz [4]byte
	if _, err := io.ReadFull(r, sz[:]); err != nil {
		return nil, err
	}
	n := int32(binary.BigEndian.Uint32(sz[:]))
	switch {
	case n < 0 || n > max:
		return nil, fmt.Errorf("%w: %d bytes, max %d", ErrFrameTooLarge, uint32(n), max)
	case n < 8:
		return nil, fmt.Errorf("%w: %d bytes", ErrFrameTooSmall, n)
	}
	buf := bufpool.Get(int(n))
	if _, err := io.ReadFull(r, buf); err != nil {
		bufpool.Put(buf)
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return buf, nil
}

// ParseRequest splits a request frame (without its size prefix) into
// header and body and decodes the body when kmsg knows the key and
// version. A nil Req with a nil error means the frame is well formed but
// the agent does not decode it. The Exchange's RawReq and the decoded
// request's byte fields (a produce's records) point into frame, which the
// caller MUST NOT reuse while the Exchange is in use; frame itself is not
// modified.
func ParseRequest(frame []byte) (*filter.Exchange, error) {
	if len(frame) < 8 {
		return nil, ErrFrameTooSmall
	}
	h := filter.Header{
		APIKey:        int16(binary.BigEndian.Uint16(frame[0:])),
		APIVersion:    int16(binary.BigEndian.Uint16(frame[2:])),
		CorrelationID: int32(binary.BigEndian.Uint32(frame[4:])),
	}
	rest := frame[8:]
	// Every request header since v1 carries a nullable client id.
	if len(rest) < 2 {
		return nil, fmt.Errorf("%w: no client id", ErrBadHeader)
	}
	idLen := int16(binary.BigEndian.Uint16(rest))
	rest = rest[2:]
	if idLen >= 0 {
		if int(idLen) > len(rest) {
			return nil, fmt.Errorf("%w: client id of %d bytes in %d", ErrBadHeader, idLen, len(rest))
		}
		id := string(rest[:idLen])
		h.ClientID = &id
		rest = rest[idLen:]
	} else if idLen != -1 {
		return nil, fmt.Errorf("%w: client id length %d", ErrBadHeader, idLen)
	}
	x := &filter.Exchange{Header: h}
	req := kmsg.RequestForKey(h.APIKey)
	if req == nil || h.APIVersion < 0 || h.APIVersion > req.MaxVersion() {
		x.RawReq = rest
		return x, nil
	}
	req.SetVersion(h.APIVersion)
	if req.IsFlexible() {
		// Request header v2 adds tagged fields, which no request uses yet.
		var err error
		if rest, err = SkipTags(rest); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrBadHeader, err)
		}
	}
	x.RawReq = rest
	if err := req.ReadFrom(rest); err != nil {
		return nil, fmt.Errorf("decoding %s v%d: %w", kmsg.NameForKey(h.APIKey), h.APIVersion, err)
	}
	x.Req = req
	return x, nil
}

// SkipTags skips the tagged-field section at the start of b (a flexible
// header's) and returns what follows it.
func SkipTags(b []byte) ([]byte, error) {
	n, b, err := uvarint(b)
	if err != nil {
		return nil, err
	}
	for i := uint64(0); i < n; i++ {
		if _, b, err = uvarint(b); err != nil { // tag
			return nil, err
		}
		var size uint64
		if size, b, err = uvarint(b); err != nil {
			return nil, err
		}
		if size > uint64(len(b)) {
			return nil, errors.New("tagged field past the end")
		}
		b = b[size:]
	}
	return b, nil
}

func uvarint(b []byte) (uint64, []byte, error) {
	v, n := binary.Uvarint(b)
	if n <= 0 {
		return 0, nil, errors.New("bad uvarint")
	}
	return v, b[n:], nil
}

// AppendRequestHeader appends a request header to dst: v1, or v2 (with an
// empty tagged-field section) when flexible, which MUST be
// RequestHeaderFlexible(key, version) for a broker to read it.
func AppendRequestHeader(dst []byte, key, version int16, corr int32, clientID *string, flexible bool) []byte {
	dst = binary.BigEndian.AppendUint16(dst, uint16(key))
	dst = binary.BigEndian.AppendUint16(dst, uint16(version))
	dst = binary.BigEndian.AppendUint32(dst, uint32(corr))
	if clientID == nil {
		dst = binary.BigEndian.AppendUint16(dst, 0xffff)
	} else {
		dst = binary.BigEndian.AppendUint16(dst, uint16(len(*clientID)))
		dst = append(dst, *clientID...)
	}
	if flexible {
		dst = append(dst, 0) // no tagged fields
	}
	return dst
}

// ResponseHeaderFlexible says whether a response to key at version carries
// header v1 (tagged fields). ApiVersions responses never do, so that a
// client can read them before it knows what the broker supports.
func ResponseHeaderFlexible(key, version int16) bool {
	if key == 18 {
		return false
	}
	req := kmsg.RequestForKey(key)
	if req == nil {
		return false
	}
	req.SetVersion(version)
	return req.IsFlexible()
}

// RequestHeaderFlexible says whether requests of key at version use
// flexible encoding, and so request header v2.
func RequestHeaderFlexible(key, version int16) bool {
	req := kmsg.RequestForKey(key)
	if req == nil {
		return false
	}
	req.SetVersion(version)
	return req.IsFlexible()
}
