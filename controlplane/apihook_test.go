package controlplane

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"testing"
)

// NewTestAPI is httpapi.New of cp, with the callers of the API token file
// tokens ("": none). Package httpapi imports this one, so the tests here
// that drive the control plane through its HTTP API reach it through this
// variable, which api_test.go sets from package controlplane_test.
var NewTestAPI func(cp *ControlPlane, tokens string) (http.Handler, error)

// newTestAPI is NewTestAPI, failing t on an error.
func newTestAPI(t *testing.T, cp *ControlPlane, tokens string) http.Handler {
	t.Helper()
	h, err := NewTestAPI(cp, tokens)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func tokenSum(token string) string {
	s := sha256.Sum256([]byte(token))
	return hex.EncodeToString(s[:])
}
