package domain

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/nodesmith/nodesmith/libs/contract"

	"github.com/nodesmith/nodesmith/libs/providerid"
)

func TestCAStateOf(t *testing.T) {
	tests := []struct {
		in       InstanceState
		want     CAState
		reported bool
	}{
		{StateUnspecified, CAStateNone, false},
		{StatePending, CAStateCreating, true},
		{StateCreating, CAStateCreating, true},
		{StateCreated, CAStateCreating, true},
		{StateJoined, CAStateCreating, true},
		{StateRunning, CAStateRunning, true},
		{StatePendingDeletion, CAStateDeleting, true},
		{StateDeleting, CAStateDeleting, true},
		{StateDeleted, CAStateNone, false},
		{InstanceState(42), CAStateNone, false},
	}
	for _, tt := range tests {
		t.Run(tt.in.String(), func(t *testing.T) {
			got, reported := CAStateOf(tt.in)
			if got != tt.want || reported != tt.reported {
				t.Errorf("CAStateOf(%v) = %v, %v; want %v, %v", tt.in, got, reported, tt.want, tt.reported)
			}
		})
	}
}

func TestParseInstanceState(t *testing.T) {
	for _, s := range InstanceStates() {
		for _, spelling := range []string{s.String(), "instance_state_" + s.String(), " " + s.String() + " "} {
			got, ok := ParseInstanceState(spelling)
			if !ok || got != s {
				t.Errorf("ParseInstanceState(%q) = %v, %v; want %v", spelling, got, ok, s)
			}
		}
	}
	if got, ok := ParseInstanceState("pending-deletion"); !ok || got != StatePendingDeletion {
		t.Errorf("kebab case: got %v, %v", got, ok)
	}
	for _, bad := range []string{"", "UNSPECIFIED", "RUN", "INSTANCE_STATE_UNSPECIFIED", "9"} {
		if _, ok := ParseInstanceState(bad); ok {
			t.Errorf("ParseInstanceState(%q) accepted", bad)
		}
	}
}

func TestErrorClass(t *testing.T) {
	for in, want := range map[int32]int32{0: 99, 1: 1, 2: 99, 99: 99, -1: 99} {
		if got := ErrorClass(in); got != want {
			t.Errorf("ErrorClass(%d) = %d, want %d", in, got, want)
		}
	}
}

func TestPlaceholderProviderID(t *testing.T) {
	id := providerid.Placeholder("workers", "i-01")
	if id != "nodesmith:///workers/i-01" {
		t.Fatalf("PlaceholderProviderID = %q", id)
	}
	g, i, ok := providerid.ParsePlaceholder(id)
	if !ok || g != "workers" || i != "i-01" {
		t.Fatalf("round trip: %q %q %v", g, i, ok)
	}
	for _, bad := range []string{"", "nodesmith:///", "nodesmith:///g", "nodesmith:///g/", "nodesmith:////i", "nodesmith:///g/i/x", "tencentcloud:///ap-1/ins-1", "nodesmith://g/i"} {
		if _, _, ok := providerid.ParsePlaceholder(bad); ok {
			t.Errorf("providerid.ParsePlaceholder(%q) accepted", bad)
		}
	}
}

func ptr[T any](v T) *T { return &v }

func TestPickDuration(t *testing.T) {
	d := func(v time.Duration) *time.Duration { return &v }
	tests := []struct {
		name            string
		current, legacy *time.Duration
		want            *time.Duration
	}{
		{"neither", nil, nil, nil},
		{"current only", d(time.Minute), nil, d(time.Minute)},
		{"legacy only", nil, d(2 * time.Minute), d(2 * time.Minute)},
		{"both: current wins", d(time.Minute), d(2 * time.Minute), d(time.Minute)},
		{"zero current, positive legacy: legacy", d(0), d(2 * time.Minute), d(2 * time.Minute)},
		{"zero current, no legacy: zero", d(0), nil, d(0)},
		{"zero legacy only: zero", nil, d(0), d(0)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := PickDuration(tt.current, tt.legacy)
			if (got == nil) != (tt.want == nil) || (got != nil && *got != *tt.want) {
				t.Errorf("PickDuration = %v, want %v", fmtD(got), fmtD(tt.want))
			}
		})
	}
}

func fmtD(d *time.Duration) string {
	if d == nil {
		return "nil"
	}
	return d.String()
}

func TestResolveOptions(t *testing.T) {
	caFull := PartialOptions{
		ScaleDownUtilizationThreshold:    ptr(0.6),
		ScaleDownGPUUtilizationThreshold: ptr(0.7),
		ZeroOrMaxNodeScaling:             ptr(false),
		IgnoreDaemonSetsUtilization:      ptr(true),
		ScaleDownUnneeded:                ptr(5 * time.Minute),
		ScaleDownUnready:                 ptr(6 * time.Minute),
		MaxNodeProvision:                 ptr(7 * time.Minute),
	}
	tests := []struct {
		name                string
		defaults, overrides PartialOptions
		want                Options
		ok                  bool
	}{
		{name: "nothing at all: unimplemented", ok: false},
		{
			name: "defaults only are echoed", defaults: caFull, ok: true,
			want: Options{0.6, 0.7, false, true, 5 * time.Minute, 6 * time.Minute, 7 * time.Minute},
		},
		{
			name: "overrides win field by field", defaults: caFull, ok: true,
			overrides: PartialOptions{ScaleDownUtilizationThreshold: ptr(0.3), ZeroOrMaxNodeScaling: ptr(true), ScaleDownUnneeded: ptr(time.Minute)},
			want:      Options{0.3, 0.7, true, true, time.Minute, 6 * time.Minute, 7 * time.Minute},
		},
		{
			name: "overrides without defaults fill from CA's built-in defaults", ok: true,
			overrides: PartialOptions{ScaleDownUnready: ptr(time.Hour)},
			want:      Options{0.5, 0.5, false, false, 10 * time.Minute, time.Hour, 15 * time.Minute},
		},
		{
			name: "zero max provision in defaults never wins", ok: true,
			defaults: PartialOptions{MaxNodeProvision: ptr(time.Duration(0)), ScaleDownUnneeded: ptr(time.Duration(0))},
			want:     Options{0.5, 0.5, false, false, 0, 20 * time.Minute, 15 * time.Minute},
		},
		{
			name: "zero max provision override falls back to the default", defaults: caFull, ok: true,
			overrides: PartialOptions{MaxNodeProvision: ptr(time.Duration(0))},
			want:      Options{0.6, 0.7, false, true, 5 * time.Minute, 6 * time.Minute, 7 * time.Minute},
		},
		{
			name: "negative durations are ignored", defaults: caFull, ok: true,
			overrides: PartialOptions{ScaleDownUnneeded: ptr(-time.Minute), MaxNodeProvision: ptr(-time.Minute)},
			want:      Options{0.6, 0.7, false, true, 5 * time.Minute, 6 * time.Minute, 7 * time.Minute},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := ResolveOptions(tt.defaults, tt.overrides)
			if ok != tt.ok || got != tt.want {
				t.Errorf("ResolveOptions = %+v, %v; want %+v, %v", got, ok, tt.want, tt.ok)
			}
			if ok && got.MaxNodeProvision <= 0 {
				t.Errorf("MaxNodeProvision must never be zero, got %v", got.MaxNodeProvision)
			}
		})
	}
}

func TestNodePrice(t *testing.T) {
	start := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name   string
		hourly float64
		s, e   time.Time
		want   float64
		code   Code
	}{
		{"two hours", 0.5, start, start.Add(2 * time.Hour), 1.0, contract.CodeOK},
		{"ninety minutes", 2, start, start.Add(90 * time.Minute), 3, contract.CodeOK},
		{"empty period", 2, start, start, 0, contract.CodeOK},
		{"no price", 0, start, start.Add(time.Hour), 0, contract.CodeUnimplemented},
		{"negative price", -1, start, start.Add(time.Hour), 0, contract.CodeUnimplemented},
		{"NaN price", math.NaN(), start, start.Add(time.Hour), 0, contract.CodeUnimplemented},
		{"end before start", 1, start, start.Add(-time.Hour), 0, contract.CodeInvalidArgument},
		{"missing start", 1, time.Time{}, start, 0, contract.CodeInvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := NodePrice(tt.hourly, tt.s, tt.e)
			if CodeOf(err) != tt.code {
				t.Fatalf("code = %v (%v), want %v", CodeOf(err), err, tt.code)
			}
			if math.Abs(got-tt.want) > 1e-9 {
				t.Errorf("price = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestPodPrice(t *testing.T) {
	start := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	end := start.Add(2 * time.Hour)
	offers := []CPUOffer{
		{HourlyPrice: 0.8, MilliCPU: 4000}, // 0.2 per CPU-hour
		{HourlyPrice: 0.9, MilliCPU: 9000}, // 0.1 per CPU-hour: cheapest
		{HourlyPrice: 0, MilliCPU: 1000},   // unpriced: ignored
		{HourlyPrice: 0.1, MilliCPU: 0},    // no CPU known: ignored
	}
	got, err := PodPrice(offers, 500, start, end)
	if err != nil {
		t.Fatal(err)
	}
	if want := 0.1 * 0.5 * 2; math.Abs(got-want) > 1e-9 {
		t.Errorf("PodPrice = %v, want %v", got, want)
	}
	if _, err := PodPrice(offers[2:], 500, start, end); CodeOf(err) != contract.CodeUnimplemented {
		t.Errorf("no usable offer: code %v, want unimplemented", CodeOf(err))
	}
	if _, err := PodPrice(offers, 500, end, start); CodeOf(err) != contract.CodeInvalidArgument {
		t.Errorf("reversed period: code %v", CodeOf(err))
	}
}

func TestValidation(t *testing.T) {
	tests := []struct {
		name string
		err  error
		ok   bool
	}{
		{"group id", ValidateGroupID("g"), true},
		{"empty group id", ValidateGroupID(""), false},
		{"increase +1", ValidateIncrease(1), true},
		{"increase 0", ValidateIncrease(0), false},
		{"increase -1", ValidateIncrease(-1), false},
		{"decrease -1", ValidateDecrease(-1), true},
		{"decrease 0", ValidateDecrease(0), false},
		{"decrease +1", ValidateDecrease(1), false},
		{"target within", ValidateTargetSize(3, 0, 5), true},
		{"target at min", ValidateTargetSize(0, 0, 5), true},
		{"target over max", ValidateTargetSize(6, 0, 5), false},
		{"target under min", ValidateTargetSize(0, 1, 5), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if (tt.err == nil) != tt.ok {
				t.Fatalf("err = %v, want ok=%v", tt.err, tt.ok)
			}
			if tt.err != nil && CodeOf(tt.err) != contract.CodeInvalidArgument {
				t.Errorf("code = %v, want invalid_argument", CodeOf(tt.err))
			}
		})
	}
}

func TestCodeOf(t *testing.T) {
	wrapped := fmt.Errorf("context: %w", Errorf(contract.CodeNotFound, "nope"))
	if CodeOf(wrapped) != contract.CodeNotFound || MessageOf(wrapped) != "nope" {
		t.Errorf("wrapped: %v %q", CodeOf(wrapped), MessageOf(wrapped))
	}
	if CodeOf(nil) != contract.CodeOK || CodeOf(errors.New("x")) != contract.CodeUnknown {
		t.Error("nil or plain errors misclassified")
	}
	if contract.CodeNotFound.String() != "not_found" || Code(99).String() != "code_99" {
		t.Error("code names")
	}
}

func TestValidateNewGroupID(t *testing.T) {
	for id, ok := range map[string]bool{
		// Lifecycle's rule (libs/contract): a DNS-1123 label of at most 40.
		"web": true, "gpu-a10-2": true, "a1": true, strings.Repeat("x", 40): true,
		"gpu-a10_2": false, "A1": false, strings.Repeat("x", 41): false,
		"": false, "a.b": false, "a b": false, "a*": false, "a>": false, "ünï": false,
	} {
		if err := ValidateNewGroupID(id); (err == nil) != ok {
			t.Errorf("ValidateNewGroupID(%q) = %v, want ok=%v", id, err, ok)
		}
	}
}

func TestValidateBounds(t *testing.T) {
	for _, tt := range []struct {
		minSize, maxSize, target int32
		ok                       bool
	}{{0, 0, 0, true}, {1, 5, 3, true}, {-1, 5, 0, false}, {3, 2, 2, false}, {0, 5, 6, false}} {
		if err := ValidateBounds(tt.minSize, tt.maxSize, tt.target); (err == nil) != tt.ok {
			t.Errorf("ValidateBounds(%d, %d, %d) = %v", tt.minSize, tt.maxSize, tt.target, err)
		}
	}
}
