//go:build !unix

package agent

import "net"

// reservedPort listens at once where ports cannot be bound without
// listening: connections wait in the backlog until the agent is ready.
type reservedPort struct{ ln net.Listener }

func reservePort(addr string) (*reservedPort, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return &reservedPort{ln}, nil
}

func (r *reservedPort) Addr() net.Addr                { return r.ln.Addr() }
func (r *reservedPort) listen() (net.Listener, error) { return r.ln, nil }
func (r *reservedPort) Close() error                  { return r.ln.Close() }
