package controlplane_test

import (
	"io"
	"log/slog"
	"net/http"

	"github.com/baton-kafka/baton/controlplane"
	"github.com/baton-kafka/baton/controlplane/httpapi"
)

// init gives the tests of package controlplane the HTTP API
// (controlplane.NewTestAPI): this package may import httpapi, theirs not.
func init() {
	controlplane.NewTestAPI = func(cp *controlplane.ControlPlane, tokens string) (http.Handler, error) {
		opts := []httpapi.Opt{httpapi.Logger(slog.New(slog.NewTextHandler(io.Discard, nil)))}
		if tokens != "" {
			ts, err := httpapi.ParseTokens([]byte(tokens))
			if err != nil {
				return nil, err
			}
			opts = append(opts, httpapi.Tokens(ts))
		}
		return httpapi.New(cp, opts...), nil
	}
}
