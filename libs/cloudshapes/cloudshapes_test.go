package cloudshapes_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/nodesmith/nodesmith/libs/cloudshapes"
	"github.com/nodesmith/nodesmith/libs/cloudspec"
)

func TestCheck(t *testing.T) {
	target := cloudshapes.Target{Provider: "tencent", Account: "prod", Region: "ap-guangzhou"}
	offerings := []cloudspec.Offering{{Zone: "z1", InstanceType: "S5.MEDIUM4"}, {Zone: "z2", InstanceType: "S5.MEDIUM4"}, {Zone: "z1", InstanceType: "SR1.MEDIUM4"}}
	shapes := []cloudspec.Shape{
		{Zone: "z1", InstanceType: "S5.MEDIUM4", VCPU: 2, MemoryMiB: 4096, Arch: "amd64"},
		{Zone: "z1", InstanceType: "SR1.MEDIUM4", VCPU: 2, MemoryMiB: 4096, Arch: "arm64"},
	}

	t.Run("asks once for the distinct zones and types", func(t *testing.T) {
		calls := 0
		ask := func(_ context.Context, got cloudshapes.Target, zones, types []string) ([]cloudspec.Shape, error) {
			calls++
			if got != target || !reflect.DeepEqual(zones, []string{"z1", "z2"}) || !reflect.DeepEqual(types, []string{"S5.MEDIUM4", "SR1.MEDIUM4"}) {
				t.Errorf("asked %+v %v %v", got, zones, types)
			}
			return shapes, nil
		}
		errs, unchecked := cloudshapes.Check(context.Background(), ask, target, offerings)
		if unchecked != nil || calls != 1 {
			t.Fatalf("unchecked %v after %d calls", unchecked, calls)
		}
		want := []string{"offerings[1].instanceType", "offerings[2].instanceType"}
		var got []string
		for _, e := range errs {
			got = append(got, e.Path)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("errors %v, want at %v", errs, want)
		}
	})
	t.Run("no offerings: no question", func(t *testing.T) {
		ask := func(context.Context, cloudshapes.Target, []string, []string) ([]cloudspec.Shape, error) {
			t.Error("asked without offerings")
			return nil, nil
		}
		if errs, unchecked := cloudshapes.Check(context.Background(), ask, target, nil); errs != nil || unchecked != nil {
			t.Errorf("got %v, %v", errs, unchecked)
		}
	})
	t.Run("unanswered: unchecked with the reason", func(t *testing.T) {
		for _, cause := range []error{fmt.Errorf("tencent: %w", cloudshapes.ErrNotSupported), errors.New("no cloud adapter answered")} {
			ask := func(context.Context, cloudshapes.Target, []string, []string) ([]cloudspec.Shape, error) {
				return nil, cause
			}
			errs, unchecked := cloudshapes.Check(context.Background(), ask, target, offerings)
			if errs != nil || !errors.Is(unchecked, cause) {
				t.Errorf("got %v, %v", errs, unchecked)
			}
			if w := cloudshapes.Warning(unchecked); !strings.HasPrefix(w, "offerings not checked against the cloud's instance shapes: ") || !strings.Contains(w, cause.Error()) {
				t.Errorf("warning %q", w)
			}
		}
		if _, unchecked := cloudshapes.Check(context.Background(), nil, target, offerings); unchecked == nil {
			t.Error("no Ask: checked")
		}
	})
}
