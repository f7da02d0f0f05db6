// Package chaos is Baton's fault-injection suite over real processes: a
// `baton controlplane`, several `baton agent`s (each in a network namespace
// of its own), real Apache Kafka clusters as source and destination, and
// producers of the client matrix writing through the agents while a seeded
// schedule kills, pauses and cuts off each of them and migrates, aborts and
// rolls back topics. After each run the history checker (package history)
// judges what the producers were told against what the clusters hold.
//
// TestChaos runs it; docs/reliability.md says how to run it and what it
// found.
package chaos

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// process is one long-running baton process the suite starts, kills and
// restarts with the same arguments, appending its output to one log.
type process struct {
	name string
	log  string
	cmd  func() *exec.Cmd

	mu     sync.Mutex
	cur    *exec.Cmd
	exited chan struct{}
}

func (p *process) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cur != nil {
		return fmt.Errorf("chaos: %s is running", p.name)
	}
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(f, "==== chaos: starting %s at %s\n", p.name, time.Now().Format(time.RFC3339Nano))
	c := p.cmd()
	c.Stdout, c.Stderr = f, f
	// Die with the test process, whatever kills it.
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := c.Start(); err != nil {
		_ = f.Close()
		return fmt.Errorf("chaos: starting %s: %w", p.name, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = c.Wait()
		_ = f.Close()
		close(exited)
	}()
	p.cur, p.exited = c, exited
	return nil
}

// signal sends sig to the running process.
func (p *process) signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cur == nil {
		return fmt.Errorf("chaos: %s is not running", p.name)
	}
	return p.cur.Process.Signal(sig)
}

// kill SIGKILLs the process (continuing it first if stopped does not
// matter: SIGKILL ends a stopped process too) and waits until it is gone.
func (p *process) kill() {
	p.mu.Lock()
	c, exited := p.cur, p.exited
	p.cur = nil
	p.mu.Unlock()
	if c == nil {
		return
	}
	_ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
	<-exited
}

// pid is the running process's id, 0 when it is not running.
func (p *process) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cur == nil {
		return 0
	}
	return p.cur.Process.Pid
}

// alive says whether the process started last is still running.
func (p *process) alive() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cur == nil {
		return errors.New(p.name + " is not running")
	}
	select {
	case <-p.exited:
		return fmt.Errorf("%s exited: %v", p.name, p.cur.ProcessState)
	default:
		return nil
	}
}
