// Package podlabel sets one label on the Kubernetes pod a process runs in,
// through the Kubernetes API with the pod's own service account: how a
// control plane replica marks itself the leader, so that a Service
// selecting the label routes the HTTP API to the leader alone.
package podlabel

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

// Errors of podlabel, one prefix.
var (
	// ErrNotInCluster: the process does not run in a pod whose service
	// account token is mounted, or POD_NAME is not set.
	ErrNotInCluster = errors.New("podlabel: not in a Kubernetes pod")
	// ErrAPI: the Kubernetes API refused or failed the patch.
	ErrAPI = errors.New("podlabel: kubernetes API")
)

// DefaultServiceAccountDir is where Kubernetes mounts a pod's service
// account; ServiceAccountDirEnv, if set, names another directory of the
// same files (token, ca.crt, namespace).
const (
	DefaultServiceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"
	ServiceAccountDirEnv     = "BATON_SERVICE_ACCOUNT_DIR"
)

// Pod is the pod to label and how to reach the API server.
type Pod struct {
	// Server is the API server's base URL (https://host:port).
	Server string
	// TokenFile holds the bearer token, read again at every call (bound
	// service account tokens are rotated in place).
	TokenFile string
	// CA verifies the API server.
	CA *x509.CertPool
	// Namespace and Name are the pod's.
	Namespace, Name string
	// Client sends the requests; nil: one with the CA and a 10 s timeout.
	Client *http.Client
}

// InCluster is the pod the process runs in: the API server from
// KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT, the mounted service
// account's token, CA and namespace (POD_NAMESPACE, if set, wins), and the
// pod's name from POD_NAME (the downward API's metadata.name).
func InCluster() (*Pod, error) {
	serviceAccountDir := DefaultServiceAccountDir
	if d := os.Getenv(ServiceAccountDirEnv); d != "" {
		serviceAccountDir = d
	}
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return nil, fmt.Errorf("%w: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set", ErrNotInCluster)
	}
	name := os.Getenv("POD_NAME")
	if name == "" {
		return nil, fmt.Errorf("%w: POD_NAME is not set (give it the pod's metadata.name from the downward API)", ErrNotInCluster)
	}
	caPEM, err := os.ReadFile(serviceAccountDir + "/ca.crt")
	if err != nil {
		return nil, fmt.Errorf("%w: the service account is not mounted (automountServiceAccountToken): %w", ErrNotInCluster, err)
	}
	ca := x509.NewCertPool()
	if !ca.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("%w: %s/ca.crt holds no certificate", ErrNotInCluster, serviceAccountDir)
	}
	ns := os.Getenv("POD_NAMESPACE")
	if ns == "" {
		b, err := os.ReadFile(serviceAccountDir + "/namespace")
		if err != nil {
			return nil, fmt.Errorf("%w: POD_NAMESPACE is not set and %w", ErrNotInCluster, err)
		}
		ns = strings.TrimSpace(string(b))
	}
	return &Pod{Server: "https://" + net.JoinHostPort(host, port), TokenFile: serviceAccountDir + "/token", CA: ca,
		Namespace: ns, Name: name}, nil
}

// Set sets the pod's label key to value with a JSON merge patch (RBAC:
// patch on pods in the pod's namespace).
func (p *Pod) Set(ctx context.Context, key, value string) error {
	token, err := os.ReadFile(p.TokenFile)
	if err != nil {
		return fmt.Errorf("%w: the service account token: %w", ErrNotInCluster, err)
	}
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]string{key: value}}})
	if err != nil {
		return err
	}
	u := p.Server + "/api/v1/namespaces/" + url.PathEscape(p.Namespace) + "/pods/" + url.PathEscape(p.Name)
	req, err := http.NewRequestWithContext(ctx, http.MethodPatch, u, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/merge-patch+json")
	req.Header.Set("Accept", "application/json")
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	c := p.Client
	if c == nil {
		c = &http.Client{Timeout: 10 * time.Second,
			Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: p.CA, MinVersion: tls.VersionTLS12}}}
	}
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("%w: PATCH pod %s/%s: %w", ErrAPI, p.Namespace, p.Name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 == 2 {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	// A Status object says why (forbidden: the RBAC is missing).
	var st struct {
		Message string `json:"message"`
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if json.Unmarshal(b, &st) != nil || st.Message == "" {
		st.Message = strings.TrimSpace(string(b))
	}
	return &APIError{Code: resp.StatusCode, Status: resp.Status, Message: st.Message, Pod: p.Namespace + "/" + p.Name}
}

// APIError is the Kubernetes API's refusal of a patch; it is ErrAPI.
type APIError struct {
	Code            int
	Status, Message string
	Pod             string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("%v: PATCH pod %s: %s: %s", ErrAPI, e.Pod, e.Status, e.Message)
}

func (e *APIError) Unwrap() error { return ErrAPI }

// Temporary says whether err may pass if the call is made again: the API
// server out of reach or answering 429 or 5xx (being upgraded,
// overloaded). A refusal (401, 403, 404, 422) is final.
func Temporary(err error) bool {
	var ae *APIError
	if errors.As(err, &ae) {
		return ae.Code == http.StatusTooManyRequests || ae.Code >= 500
	}
	return errors.Is(err, ErrAPI) // no answer at all
}

// NotFound says whether err is the API's answer that the pod does not
// exist.
func NotFound(err error) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.Code == http.StatusNotFound
}

// Other is the pod named name in p's namespace, reached as p is.
func (p *Pod) Other(name string) *Pod {
	o := *p
	o.Name = name
	return &o
}
