package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"

	"github.com/baton-kafka/baton/controlplane"
	"github.com/baton-kafka/baton/controlplane/httpapi"
	"github.com/baton-kafka/baton/controlplane/rollout"
)

// A wave's migrate refused because the topic's time lag was not measured
// is retried once it is, even when the lag is measured by the time the
// wave's other cutovers were followed: the refusal's reason says why it
// was refused, the status read after says only what holds now.
func TestUnmeasuredTakesTheRefusalsReason(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Every topic's lag is measured by now.
		_ = json.NewEncoder(w).Encode(controlplane.TopicStatus{})
	}))
	defer srv.Close()
	rw := rolloutWaves{cl: &httpapi.Client{Base: srv.URL}}
	refused := []rollout.WaveStay{
		{Topic: "t-b", Reason: "controlplane: cutover gate refused: t-b: gate time-lag: time lag unknown: replication: the topic's " +
			"copy is not ready: t-b/0 has not resumed copying yet; to start anyway: baton topic migrate t-b --force=time-lag"},
		{Topic: "t-c", Reason: "controlplane: cutover gate refused: t-c: gate time-lag: time lag 9s is above cutover timeout/4 = 2.5s"},
	}
	got, err := rw.unmeasured(context.Background(), refused)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, []string{"t-b"}) {
		t.Errorf("unmeasured = %v, want [t-b]: refused for a lag not measured, unlike t-c's lag above the limit", got)
	}
}
