//go:build unix

package agent

import (
	"fmt"
	"net"
	"os"
	"syscall"
)

// reservedPort is a TCP address bound but not listened on: the port is the
// agent's (Addr is known, nobody else can take it) while connections to it
// are refused. Until the agent has reached the source once it cannot say
// what it serves; a refused connection is what every client knows how to
// take (librdkafka: "Connect to ... failed: Connection refused", then it
// retries), where a connection accepted but never answered ends in an
// ApiVersions timeout that librdkafka blames on "broker version < 0.10".
type reservedPort struct {
	fd   int
	addr *net.TCPAddr
}

func reservePort(addr string) (*reservedPort, error) {
	ta, err := net.ResolveTCPAddr("tcp", addr)
	if err != nil {
		return nil, err
	}
	var (
		family = syscall.AF_INET
		sa     syscall.Sockaddr
	)
	if ip4 := ta.IP.To4(); ta.IP == nil || ip4 != nil {
		s := &syscall.SockaddrInet4{Port: ta.Port}
		copy(s.Addr[:], ip4) // nil: every address
		sa = s
	} else {
		family = syscall.AF_INET6
		s := &syscall.SockaddrInet6{Port: ta.Port}
		copy(s.Addr[:], ta.IP.To16())
		sa = s
	}
	fd, err := syscall.Socket(family, syscall.SOCK_STREAM, 0)
	if err != nil {
		return nil, os.NewSyscallError("socket", err)
	}
	syscall.CloseOnExec(fd)
	if err := syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1); err != nil {
		syscall.Close(fd)
		return nil, os.NewSyscallError("setsockopt", err)
	}
	if err := syscall.Bind(fd, sa); err != nil {
		syscall.Close(fd)
		return nil, os.NewSyscallError("bind", err)
	}
	got, err := syscall.Getsockname(fd)
	if err != nil {
		syscall.Close(fd)
		return nil, os.NewSyscallError("getsockname", err)
	}
	r := &reservedPort{fd: fd, addr: &net.TCPAddr{IP: ta.IP}}
	switch s := got.(type) {
	case *syscall.SockaddrInet4:
		r.addr.Port = s.Port
	case *syscall.SockaddrInet6:
		r.addr.Port = s.Port
	}
	if r.addr.IP == nil {
		r.addr.IP = net.IPv4zero
	}
	return r, nil
}

func (r *reservedPort) Addr() net.Addr { return r.addr }

// listen starts accepting on the reserved port.
func (r *reservedPort) listen() (net.Listener, error) {
	if err := syscall.Listen(r.fd, syscall.SOMAXCONN); err != nil {
		return nil, os.NewSyscallError("listen", err)
	}
	f := os.NewFile(uintptr(r.fd), "agent listener")
	defer f.Close() // FileListener holds its own copy
	ln, err := net.FileListener(f)
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	return ln, nil
}

func (r *reservedPort) Close() error { return syscall.Close(r.fd) }
