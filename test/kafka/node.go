package kafka

import (
	"context"
	"fmt"
	"time"
)

// StopNode stops node id as a crash or a maintenance would: SIGTERM, then
// SIGKILL after grace (0: SIGKILL at once, no clean shutdown). Its data
// stays; RestartNode brings it back. The other nodes keep running.
func (c *Cluster) StopNode(id int, grace time.Duration) error {
	i, err := c.nodeIndex(id)
	if err != nil {
		return err
	}
	var p *proc
	if i < len(c.procs) {
		p = c.procs[i]
	}
	if err := stopNode(c.nodes[i], p, grace); err != nil {
		return err
	}
	c.nodes[i].PID = 0
	return nil
}

// RestartNode starts a node that StopNode stopped, on its ports and data,
// and waits until every node answers Metadata listing all of them again.
func (c *Cluster) RestartNode(ctx context.Context, id int) error {
	i, err := c.nodeIndex(id)
	if err != nil {
		return err
	}
	if c.java == "" {
		return fmt.Errorf("kafka: node %d: only a cluster started by this process can restart a node", id)
	}
	if c.nodes[i].PID > 0 {
		return fmt.Errorf("kafka: node %d is running (pid %d)", id, c.nodes[i].PID)
	}
	p, err := startNode(c.cfg, c.dir, c.java, c.cp, c.nodes[i])
	if err != nil {
		return err
	}
	c.procs[i] = p
	c.nodes[i].PID = p.pid()
	if err := c.writeState(c.cfg.detached); err != nil {
		return err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultStartTimeout)
		defer cancel()
	}
	return c.waitReady(ctx)
}

func (c *Cluster) nodeIndex(id int) (int, error) {
	for i, n := range c.nodes {
		if n.ID == id {
			return i, nil
		}
	}
	return 0, fmt.Errorf("kafka: no node %d in %s", id, c.Bootstrap())
}
