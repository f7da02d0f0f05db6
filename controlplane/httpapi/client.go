package httpapi

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/baton-kafka/baton/controlplane"
	"github.com/baton-kafka/baton/controlplane/rollout"
	"github.com/baton-kafka/baton/migration"
)

// Client speaks the HTTP API (the CLI's side). Its errors of an answer
// are *Error, unwrapping to the controlplane sentinel they carry.
type Client struct {
	Base string // http://host:port or https://host:port
	// HTTP sends the requests (default http.DefaultClient); its
	// transport holds the TLS settings of an https:// Base.
	HTTP *http.Client
	// Token is sent as a bearer token when set (see Tokens).
	Token string
}

// send sends req with the token, if any.
func (c *Client) send(req *http.Request) (*http.Response, error) {
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	return hc.Do(req)
}

func (c *Client) do(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(c.Base, "/")+path, rd)
	if err != nil {
		return err
	}
	resp, err := c.send(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return readError(resp)
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// Topics lists topics.
func (c *Client) Topics(ctx context.Context) ([]controlplane.Topic, error) {
	var out []controlplane.Topic
	return out, c.do(ctx, http.MethodGet, "/v1/topics", nil, &out)
}

// Add adds a topic.
func (c *Client) Add(ctx context.Context, spec controlplane.TopicSpec, actor string) (controlplane.Topic, error) {
	var out controlplane.Topic
	body := struct {
		controlplane.TopicSpec
		Actor string `json:"actor"`
	}{spec, actor}
	return out, c.do(ctx, http.MethodPost, "/v1/topics", body, &out)
}

// Status returns a topic with its lag.
func (c *Client) Status(ctx context.Context, name string) (controlplane.TopicStatus, error) {
	var out controlplane.TopicStatus
	return out, c.do(ctx, http.MethodGet, "/v1/topics/"+url.PathEscape(name), nil, &out)
}

// Op runs abort or state on a topic, or migrate without forcing a gate.
func (c *Client) Op(ctx context.Context, name, op, actor, reason, state string) (controlplane.Topic, error) {
	var out controlplane.Topic
	return out, c.do(ctx, http.MethodPost, "/v1/topics/"+url.PathEscape(name)+"/"+op,
		map[string]string{"actor": actor, "reason": reason, "state": state}, &out)
}

// SetState moves a topic to REJECT or PROXY (the state endpoint).
func (c *Client) SetState(ctx context.Context, name string, to migration.State, actor string) (controlplane.Topic, error) {
	return c.Op(ctx, name, "state", actor, "", to.String())
}

// Remove stops managing a topic; a COMPLETE one only with force (see
// controlplane.ControlPlane.RemoveTopic). The Topic answered is the one removed, its
// state migration.Unmanaged.
func (c *Client) Remove(ctx context.Context, name, actor string, force bool) (controlplane.Topic, error) {
	var out controlplane.Topic
	q := url.Values{"actor": {actor}}
	if force {
		q.Set("force", "true")
	}
	return out, c.do(ctx, http.MethodDelete, "/v1/topics/"+url.PathEscape(name)+"?"+q.Encode(), nil, &out)
}

// Migrate starts a cutover of name, forced past the gates listed in force
// (gate names, or "all"; none when empty).
func (c *Client) Migrate(ctx context.Context, name, actor string, force []string) (controlplane.Topic, error) {
	var out controlplane.Topic
	return out, c.do(ctx, http.MethodPost, "/v1/topics/"+url.PathEscape(name)+"/migrate",
		map[string]any{"actor": actor, "force": force}, &out)
}

// Shadow switches a topic's shadow features.
func (c *Client) Shadow(ctx context.Context, name string, ch controlplane.ShadowChange, actor string) (controlplane.Topic, error) {
	var out controlplane.Topic
	body := struct {
		controlplane.ShadowChange
		Actor string `json:"actor"`
	}{ch, actor}
	return out, c.do(ctx, http.MethodPost, "/v1/topics/"+url.PathEscape(name)+"/shadow", body, &out)
}

// Agents lists agents.
func (c *Client) Agents(ctx context.Context) ([]controlplane.AgentView, error) {
	var out []controlplane.AgentView
	return out, c.do(ctx, http.MethodGet, "/v1/agents", nil, &out)
}

// Workers returns how the control plane replicates and its workers.
func (c *Client) Workers(ctx context.Context) (controlplane.Workers, error) {
	var out controlplane.Workers
	return out, c.do(ctx, http.MethodGet, "/v1/workers", nil, &out)
}

// Events returns the log, or with follow calls each until ctx ends.
func (c *Client) Events(ctx context.Context, topic string, follow bool, each func(controlplane.Event) error) error {
	q := url.Values{}
	if topic != "" {
		q.Set("topic", topic)
	}
	if !follow {
		var out []controlplane.Event
		if err := c.do(ctx, http.MethodGet, "/v1/events?"+q.Encode(), nil, &out); err != nil {
			return err
		}
		for _, e := range out {
			if err := each(e); err != nil {
				return err
			}
		}
		return nil
	}
	q.Set("follow", "1")
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(c.Base, "/")+"/v1/events?"+q.Encode(), nil)
	if err != nil {
		return err
	}
	resp, err := c.send(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return readError(resp)
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var e controlplane.Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return err
		}
		if err := each(e); err != nil {
			return err
		}
	}
	if ctx.Err() != nil {
		return nil
	}
	return sc.Err()
}

// Clusters reads the clusters the control plane migrates between.
func (c *Client) Clusters(ctx context.Context) (controlplane.ClustersView, error) {
	var out controlplane.ClustersView
	return out, c.do(ctx, http.MethodGet, "/v1/clusters", nil, &out)
}

// SourceTopics lists the source cluster's topics.
func (c *Client) SourceTopics(ctx context.Context) ([]string, error) {
	var out []string
	return out, c.do(ctx, http.MethodGet, "/v1/source-topics", nil, &out)
}

// Rollout returns the rollout's state (GET /v1/rollout).
func (c *Client) Rollout(ctx context.Context) (rollout.Status, error) {
	var out rollout.Status
	return out, c.do(ctx, http.MethodGet, "/v1/rollout", nil, &out)
}

// RunWave runs a wave (POST /v1/rollout/waves).
func (c *Client) RunWave(ctx context.Context, req rollout.WaveRequest, actor string) (rollout.WaveRun, error) {
	var out rollout.WaveRun
	body := struct {
		rollout.WaveRequest
		Actor string `json:"actor"`
	}{req, actor}
	return out, c.do(ctx, http.MethodPost, "/v1/rollout/waves", body, &out)
}
