package injector_test

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// applyPatch applies an RFC 6902 patch of add and replace operations (all
// the injector makes) to doc, failing t on any other operation or a path
// that does not resolve as the RFC says.
func applyPatch(t *testing.T, doc, patch []byte) []byte {
	t.Helper()
	var root any
	if err := json.Unmarshal(doc, &root); err != nil {
		t.Fatal(err)
	}
	var ops []struct {
		Op    string          `json:"op"`
		Path  string          `json:"path"`
		Value json.RawMessage `json:"value"`
	}
	if err := json.Unmarshal(patch, &ops); err != nil {
		t.Fatalf("the patch is not a JSON patch: %v\n%s", err, patch)
	}
	for i, op := range ops {
		var v any
		if err := json.Unmarshal(op.Value, &v); err != nil {
			t.Fatalf("op %d: value: %v", i, err)
		}
		var err error
		if root, err = applyOp(root, op.Op, op.Path, v); err != nil {
			t.Fatalf("op %d (%s %s): %v", i, op.Op, op.Path, err)
		}
	}
	b, err := json.Marshal(root)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func applyOp(root any, op, path string, v any) (any, error) {
	if op != "add" && op != "replace" {
		return nil, fmt.Errorf("operation %q not supported by this test's patcher", op)
	}
	if path == "" {
		return v, nil
	}
	if !strings.HasPrefix(path, "/") {
		return nil, fmt.Errorf("path does not start with /")
	}
	toks := strings.Split(path[1:], "/")
	for i, tok := range toks {
		toks[i] = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
	}
	return set(root, toks, op, v)
}

// set applies op at toks below node and returns the new node (arrays
// grow, so a parent must store what its child returns).
func set(node any, toks []string, op string, v any) (any, error) {
	tok, last := toks[0], len(toks) == 1
	switch n := node.(type) {
	case map[string]any:
		if last {
			if _, ok := n[tok]; op == "replace" && !ok {
				return nil, fmt.Errorf("replace of %q, which is absent", tok)
			}
			n[tok] = v
			return n, nil
		}
		child, ok := n[tok]
		if !ok {
			return nil, fmt.Errorf("%q is absent", tok)
		}
		c, err := set(child, toks[1:], op, v)
		if err != nil {
			return nil, err
		}
		n[tok] = c
		return n, nil
	case []any:
		if last && op == "add" && tok == "-" {
			return append(n, v), nil
		}
		i, err := strconv.Atoi(tok)
		if err != nil || i < 0 || i > len(n) || (i == len(n) && !(last && op == "add")) {
			return nil, fmt.Errorf("index %q out of range (length %d)", tok, len(n))
		}
		if last {
			if op == "replace" {
				n[i] = v
				return n, nil
			}
			n = append(n, nil)
			copy(n[i+1:], n[i:])
			n[i] = v
			return n, nil
		}
		c, err := set(n[i], toks[1:], op, v)
		if err != nil {
			return nil, err
		}
		n[i] = c
		return n, nil
	}
	return nil, fmt.Errorf("%q: not an object or an array", tok)
}

func TestApplyPatch(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, doc, patch, want string
	}{
		{"add a member", `{"a":1}`, `[{"op":"add","path":"/b","value":2}]`, `{"a":1,"b":2}`},
		{"append", `{"a":[1]}`, `[{"op":"add","path":"/a/-","value":2}]`, `{"a":[1,2]}`},
		{"insert at 0", `{"a":[1]}`, `[{"op":"add","path":"/a/0","value":0}]`, `{"a":[0,1]}`},
		{"replace in an array", `{"a":[{"n":"x"}]}`, `[{"op":"replace","path":"/a/0/n","value":"y"}]`, `{"a":[{"n":"y"}]}`},
		{"escaped", `{"m":{}}`, `[{"op":"add","path":"/m/baton.io~1x~0y","value":1}]`, `{"m":{"baton.io/x~y":1}}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if got := string(applyPatch(t, []byte(c.doc), []byte(c.patch))); got != c.want {
				t.Errorf("got %s, want %s", got, c.want)
			}
		})
	}
}
