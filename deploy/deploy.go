// Package deploy owns what Baton ships to run it on Kubernetes and watch
// it: the Helm chart in helm/baton, the plain manifests rendered from it
// (manifests/baton.yaml), and Render, which renders the chart offline with
// Helm's own engine, as `helm template` does, for the tests that lint,
// decode and start it (deploy.go); and the Grafana dashboard
// (grafana/baton.json) and the Prometheus alert rules
// (prometheus/baton-rules.yaml), embedded for the tests that check their
// shape and the metric names their expressions read (monitoring.go).
package deploy

import (
	"embed"
	"fmt"
	"io/fs"
	"maps"
	"path"
	"slices"
	"strings"

	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/common/util"
	"helm.sh/helm/v4/pkg/chart/loader/archive"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/engine"
	"sigs.k8s.io/yaml"
)

// ChartDir is the chart's directory, relative to this package's.
const ChartDir = "helm/baton"

//go:embed all:helm/baton
var chartFS embed.FS

// Object is one rendered Kubernetes object.
type Object struct {
	// Template is the chart file it came from.
	Template string
	// APIVersion, Kind and Name identify it.
	APIVersion, Kind, Name string
	// YAML is the object as rendered.
	YAML []byte
}

// Render renders the chart as a release named release in namespace, with
// values over the chart's defaults (nil: the defaults), for the
// Kubernetes version kubeVersion ("" : Helm's default). Objects come in
// the order of their templates' names, then their order in the template.
func Render(release, namespace string, values map[string]any, kubeVersion string) ([]Object, error) {
	var files []*archive.BufferedFile
	err := fs.WalkDir(chartFS, ChartDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := chartFS.ReadFile(p)
		if err != nil {
			return err
		}
		files = append(files, &archive.BufferedFile{Name: strings.TrimPrefix(p, ChartDir+"/"), Data: b})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%w: reading the chart: %w", ErrRender, err)
	}
	ch, err := loader.LoadFiles(files)
	if err != nil {
		return nil, fmt.Errorf("%w: loading the chart: %w", ErrRender, err)
	}
	caps := common.DefaultCapabilities.Copy()
	if kubeVersion != "" {
		kv, err := common.ParseKubeVersion(kubeVersion)
		if err != nil {
			return nil, fmt.Errorf("%w: kubernetes version: %w", ErrRender, err)
		}
		caps.KubeVersion = *kv
	}
	vals, err := util.ToRenderValues(ch, values, common.ReleaseOptions{Name: release, Namespace: namespace, IsInstall: true}, caps)
	if err != nil {
		return nil, fmt.Errorf("%w: values: %w", ErrRender, err)
	}
	out, err := engine.Render(ch, vals)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrRender, err)
	}
	var objs []Object
	for _, name := range slices.Sorted(maps.Keys(out)) {
		if path.Ext(name) != ".yaml" || strings.HasPrefix(path.Base(name), "_") {
			continue // NOTES.txt, helpers
		}
		for _, doc := range splitDocs(out[name]) {
			var meta struct {
				APIVersion string `json:"apiVersion"`
				Kind       string `json:"kind"`
				Metadata   struct {
					Name string `json:"name"`
				} `json:"metadata"`
			}
			if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
				return nil, fmt.Errorf("%w: %s: not YAML: %w", ErrRender, name, err)
			}
			if meta.Kind == "" {
				return nil, fmt.Errorf("%w: %s: a document without a kind:\n%s", ErrRender, name, doc)
			}
			objs = append(objs, Object{Template: name, APIVersion: meta.APIVersion, Kind: meta.Kind,
				Name: meta.Metadata.Name, YAML: []byte(doc)})
		}
	}
	return objs, nil
}

// splitDocs splits a rendered template into its YAML documents, dropping
// empty ones (comments only, or nothing).
func splitDocs(s string) []string {
	var docs []string
	for _, d := range strings.Split("\n"+s, "\n---") {
		keep := false
		for _, l := range strings.Split(d, "\n") {
			if t := strings.TrimSpace(l); t != "" && !strings.HasPrefix(t, "#") {
				keep = true
				break
			}
		}
		if keep {
			docs = append(docs, strings.TrimPrefix(d, "\n"))
		}
	}
	return docs
}

// Manifests is the plain manifests file: the chart rendered as release
// "baton" in namespace "baton" with its defaults, each object after a
// "# Source:" comment as `helm template` writes them.
func Manifests(objs []Object) []byte {
	var b strings.Builder
	b.WriteString("# Baton's plain manifests, rendered from deploy/helm/baton as release \"baton\" in namespace\n")
	b.WriteString("# \"baton\" (`make manifests`): its default values, but for two that keep secrets out of this\n")
	b.WriteString("# file: the injector's certificate comes from cert-manager, and the HTTP API's tokens from a\n")
	b.WriteString("# Secret baton-api-tokens you make (key tokens.yaml). Edit the chart, not this file.\n")
	for _, o := range objs {
		b.WriteString("---\n# Source: " + o.Template + "\n")
		b.WriteString(strings.TrimRight(string(o.YAML), "\n") + "\n")
	}
	return []byte(b.String())
}
