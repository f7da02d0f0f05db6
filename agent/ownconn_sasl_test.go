package agent

import (
	"context"
	"testing"
	"time"

	"github.com/baton-kafka/baton/agent/internal/upstream"
	"github.com/baton-kafka/baton/internal/saslfake"
)

// TestOwnConnReplacedBeforeSessionEnd: a client connection's own upstream
// connection (Fetch, JoinGroup, SyncGroup: router.ownConn) is replaced
// before its SASL session ends, as pooled ones are: Kafka closes it at the
// first request after the end, failing that Fetch or JoinGroup in doubt.
func TestOwnConnReplacedBeforeSessionEnd(t *testing.T) {
	const life = 400 * time.Millisecond
	b, err := saslfake.New([]string{"x"}, life)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	up := upstream.New(upstream.Config{Name: "source", Bootstrap: []string{b.Addr}, PoolSize: 1,
		DialTimeout: time.Second, ReadTimeout: 5 * time.Second,
		Security: upstream.Security{SASL: &saslfake.Mechanism{Steps: []string{"x"}}}})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r := &router{}
	defer r.close()
	send := func() error {
		c, err := r.ownConn(ctx, up, b.Addr)
		if err != nil {
			return err
		}
		cl, err := c.Send(18, 0, nil, nil, true) // stands for a Fetch
		if err != nil {
			return err
		}
		_, err = cl.Wait(ctx)
		return err
	}
	if err := send(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(life + 50*time.Millisecond)
	if err := send(); err != nil {
		t.Fatalf("a request on the client's own connection after its SASL session ended: %v (broker expired closes: %d)", err, b.Expired.Load())
	}
}
