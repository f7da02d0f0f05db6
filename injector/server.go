package injector

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"time"

	admissionv1 "k8s.io/api/admission/v1"

	"github.com/baton-kafka/baton/internal/keypair"
)

// Paths the injector serves.
const (
	// PathMutate is the webhook's path (its clientConfig's path).
	PathMutate = "/mutate"
	// PathHealthz answers 200 while the server runs.
	PathHealthz = "/healthz"
)

// maxReview bounds a review's body: a pod is at most a few hundred
// kilobytes, and the API server's requests at most 3 MiB.
const maxReview = 8 << 20

// Handler serves the webhook at PathMutate and PathHealthz. A request
// that is not a POST of JSON, or a body that is not JSON, is answered 400
// (405, 413, 415) with the reason; a JSON body is answered 200 with the
// AdmissionReview Mutate made, which says allowed false when the review
// or the pod is refused. log, if not nil, gets one line per review.
func (in *Injector) Handler(log *slog.Logger) http.Handler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	mux := http.NewServeMux()
	mux.HandleFunc(PathHealthz, func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc(PathMutate, func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			http.Error(w, "injector: POST an AdmissionReview", http.StatusMethodNotAllowed)
			return
		}
		if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
			http.Error(w, "injector: want Content-Type application/json", http.StatusUnsupportedMediaType)
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxReview))
		if err != nil {
			var tooLarge *http.MaxBytesError
			if errors.As(err, &tooLarge) {
				http.Error(w, fmt.Sprintf("injector: a review over %d bytes", maxReview), http.StatusRequestEntityTooLarge)
				return
			}
			http.Error(w, "injector: reading the review: "+err.Error(), http.StatusBadRequest)
			return
		}
		var review admissionv1.AdmissionReview
		if err := json.Unmarshal(body, &review); err != nil {
			log.Warn("bad admission review", "err", err, "remote", r.RemoteAddr)
			http.Error(w, fmt.Sprintf("%v: %v", ErrBadReview, err), http.StatusBadRequest)
			return
		}
		out := in.Mutate(review)
		resp := out.Response
		attrs := []any{"uid", resp.UID, "allowed", resp.Allowed, "injected", resp.Patch != nil}
		if req := review.Request; req != nil {
			attrs = append(attrs, "namespace", req.Namespace, "name", req.Name, "operation", req.Operation)
		}
		switch {
		case resp.Result != nil:
			log.Warn("admission refused", append(attrs, "reason", resp.Result.Message)...)
		case resp.Patch != nil:
			log.Info("agent injected", attrs...)
		default:
			log.Debug("admission unchanged", append(attrs, "warnings", resp.Warnings)...)
		}
		b, err := json.Marshal(out)
		if err != nil {
			http.Error(w, "injector: "+err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(b)
	})
	return mux
}

// Server serves an Injector's Handler over HTTPS, as the API server calls
// webhooks only over TLS.
type Server struct {
	ln  net.Listener
	srv *http.Server
	log *slog.Logger
}

// NewServer binds listen and loads the certificate and key, read again at
// every TLS handshake when the files changed (a rotated certificate is
// served without a restart). log may be nil.
func NewServer(in *Injector, listen, certFile, keyFile string, log *slog.Logger) (*Server, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if certFile == "" || keyFile == "" {
		return nil, fmt.Errorf("%w: tls: a certificate and its key are required: the API server calls webhooks over HTTPS only", ErrBadConfig)
	}
	kp, err := keypair.New(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("%w: tls: %w", ErrBadConfig, err)
	}
	tcfg := &tls.Config{MinVersion: tls.VersionTLS12}
	kp.ServerConfig(tcfg)
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("%w: listen %q: %w", ErrBadConfig, listen, err)
	}
	return &Server{
		ln:  ln,
		log: log,
		srv: &http.Server{Handler: in.Handler(log), TLSConfig: tcfg, ReadHeaderTimeout: 10 * time.Second,
			ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug)},
	}, nil
}

// Addr is the address the server listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Run serves until ctx ends, then lets requests under way finish for up
// to 5 s.
func (s *Server) Run(ctx context.Context) error {
	done := make(chan error, 1)
	go func() { done <- s.srv.ServeTLS(s.ln, "", "") }()
	select {
	case err := <-done:
		return fmt.Errorf("injector: serving: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := s.srv.Shutdown(sctx)
	<-done
	if err != nil {
		return fmt.Errorf("injector: shutting down: %w", err)
	}
	return nil
}
