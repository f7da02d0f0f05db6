package filter_test

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/baton-kafka/baton/filter"
)

// recorder is a filter that logs its calls and can stop on the request side.
type recorder struct {
	name string
	log  *[]string
	stop bool
	reqs bool
	resp bool
}

type reqOnly struct{ *recorder }
type respOnly struct{ *recorder }
type both struct{ *recorder }

func (r *recorder) onRequest(x *filter.Exchange) filter.Status {
	*r.log = append(*r.log, "req:"+r.name)
	if r.stop {
		x.Resp = kmsg.NewPtrApiVersionsResponse()
		return filter.StopIteration
	}
	return filter.Continue
}

func (r *recorder) onResponse() filter.Status {
	*r.log = append(*r.log, "resp:"+r.name)
	return filter.Continue
}

func (f reqOnly) OnRequest(_ context.Context, x *filter.Exchange) filter.Status {
	return f.onRequest(x)
}
func (f respOnly) OnResponse(context.Context, *filter.Exchange) filter.Status { return f.onResponse() }
func (f both) OnRequest(_ context.Context, x *filter.Exchange) filter.Status  { return f.onRequest(x) }
func (f both) OnResponse(context.Context, *filter.Exchange) filter.Status     { return f.onResponse() }

type factory struct{ r *recorder }

func (f factory) Name() string { return f.r.name }
func (f factory) New(filter.ConnInfo) any {
	switch {
	case f.r.reqs && f.r.resp:
		return both{f.r}
	case f.r.reqs:
		return reqOnly{f.r}
	default:
		return respOnly{f.r}
	}
}

type handler struct {
	log *[]string
	err error
}

func (h handler) Dispatch(_ context.Context, x *filter.Exchange) filter.Pending {
	*h.log = append(*h.log, "dispatch")
	if h.err == nil {
		x.RawResp = []byte{1}
	}
	return filter.Done{Err: h.err}
}

func TestChainOrder(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		filters []recorder // log is filled in
		handler error
		want    []string
		wantErr bool
	}{
		{
			name:    "requests in order, responses in reverse",
			filters: []recorder{{name: "a", reqs: true, resp: true}, {name: "b", reqs: true, resp: true}, {name: "c", reqs: true, resp: true}},
			want:    []string{"req:a", "req:b", "req:c", "dispatch", "resp:c", "resp:b", "resp:a"},
		},
		{
			name:    "one-direction filters",
			filters: []recorder{{name: "in", reqs: true}, {name: "out", resp: true}, {name: "both", reqs: true, resp: true}},
			want:    []string{"req:in", "req:both", "dispatch", "resp:both", "resp:out"},
		},
		{
			name:    "stop iteration answers and unwinds from the stopping filter",
			filters: []recorder{{name: "a", reqs: true, resp: true}, {name: "b", reqs: true, resp: true, stop: true}, {name: "c", reqs: true, resp: true}},
			want:    []string{"req:a", "req:b", "resp:b", "resp:a"},
		},
		{
			name:    "handler error reaches response filters",
			filters: []recorder{{name: "a", reqs: true, resp: true}},
			handler: errors.New("upstream gone"),
			want:    []string{"req:a", "dispatch", "resp:a"},
			wantErr: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var log []string
			var fs []filter.Factory
			for i := range tt.filters {
				r := tt.filters[i]
				r.log = &log
				fs = append(fs, factory{&r})
			}
			c := filter.NewChain(filter.ConnInfo{}, fs, handler{log: &log, err: tt.handler})
			x := &filter.Exchange{}
			c.Response(context.Background(), c.Request(context.Background(), x))
			if !reflect.DeepEqual(log, tt.want) {
				t.Errorf("calls %v, want %v", log, tt.want)
			}
			if (x.Err != nil) != tt.wantErr {
				t.Errorf("exchange error %v, want error %v", x.Err, tt.wantErr)
			}
		})
	}
}

type silent struct{}

func (silent) Name() string            { return "silent" }
func (silent) New(filter.ConnInfo) any { return silentFilter{} }

type silentFilter struct{}

func (silentFilter) OnRequest(context.Context, *filter.Exchange) filter.Status {
	return filter.StopIteration // but answers nothing
}

func TestStopWithoutAnswerIsAnError(t *testing.T) {
	t.Parallel()
	var log []string
	c := filter.NewChain(filter.ConnInfo{}, []filter.Factory{silent{}}, handler{log: &log})
	x := &filter.Exchange{}
	c.Response(context.Background(), c.Request(context.Background(), x))
	if !errors.Is(x.Err, filter.ErrNoAnswer) {
		t.Fatalf("got %v, want ErrNoAnswer", x.Err)
	}
	if len(log) != 0 {
		t.Errorf("handler ran after a filter stopped: %v", log)
	}
}
