package framing

import "errors"

// Errors. Every message starts with "framing: "; wrapped errors say what
// was read (sizes, the bound and the option that sets it).
var (
	// ErrFrameTooLarge: a client frame declares a size over MaxFrameBytes
	// or over what one connection may buffer. Like the other frame errors,
	// it closes only the connection that sent the frame.
	ErrFrameTooLarge = errors.New("framing: frame size over the configured maximum")
	// ErrFrameTooSmall: a frame too short to hold a request (or response)
	// header.
	ErrFrameTooSmall = errors.New("framing: frame too small for a request header")
	// ErrBadHeader: a request header that does not parse.
	ErrBadHeader = errors.New("framing: malformed request header")
	// ErrFrameTimeout: a request frame not read whole within FrameTimeout
	// of its first byte.
	ErrFrameTimeout = errors.New("framing: request frame not finished within the frame timeout")
	// ErrIdleTimeout: a client connection sent no request for IdleTimeout.
	ErrIdleTimeout = errors.New("framing: connection idle past the idle timeout")
)
