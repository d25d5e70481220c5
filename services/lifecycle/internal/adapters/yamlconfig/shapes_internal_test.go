package yamlconfig

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nodesmith/nodesmith/libs/cloudshapes"
	"github.com/nodesmith/nodesmith/libs/cloudspec"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
)

const shapesFile = `
accounts:
  dev:
    region: ap-guangzhou
instanceTemplates:
  web:
    account: dev
    zone: ap-guangzhou-3
    instanceType: S5.MEDIUM4
  arm:
    account: dev
    zone: ap-guangzhou-3
    instanceType: SR1.MEDIUM4
nodeGroups:
  - id: workers
    maxSize: 3
    instanceTemplate: web
`

// parseWithOfferings parses shapesFile and gives its templates offerings
// as the loader records them (noteOfferings) once the schema carries them.
func parseWithOfferings(t *testing.T, offerings map[string][]cloudspec.Offering) *Config {
	t.Helper()
	cfg, err := Parse("nodesmith.yaml", []byte(shapesFile), "")
	if err != nil {
		t.Fatal(err)
	}
	c := &checker{}
	for _, name := range sortedKeys(offerings) {
		c.noteOfferings("instanceTemplates."+name, domain.InstanceTemplate{Name: name, Provider: "tencentcloud", Account: "dev", Region: "ap-guangzhou", Offerings: offerings[name]})
	}
	cfg.offerings = c.offerings
	return cfg
}

func TestCheckShapes(t *testing.T) {
	shapes := []cloudspec.Shape{
		{Zone: "ap-guangzhou-3", InstanceType: "S5.MEDIUM4", VCPU: 2, MemoryMiB: 4096, Arch: "amd64"},
		{Zone: "ap-guangzhou-4", InstanceType: "S5.MEDIUM4", VCPU: 2, MemoryMiB: 4096, Arch: "amd64"},
		{Zone: "ap-guangzhou-3", InstanceType: "SR1.MEDIUM4", VCPU: 2, MemoryMiB: 4096, Arch: "arm64"},
	}
	var asked []string
	ask := func(_ context.Context, tg cloudshapes.Target, zones, types []string) ([]cloudspec.Shape, error) {
		asked = append(asked, fmt.Sprint(zones, types))
		if tg.Account != "dev" || tg.Region != "ap-guangzhou" {
			t.Errorf("asked about %+v", tg)
		}
		return shapes, nil
	}
	ctx := context.Background()

	t.Run("one shape", func(t *testing.T) {
		cfg := parseWithOfferings(t, map[string][]cloudspec.Offering{
			"web": {{Zone: "ap-guangzhou-3", InstanceType: "S5.MEDIUM4"}, {Zone: "ap-guangzhou-4", InstanceType: "S5.MEDIUM4"}},
		})
		if unchecked, err := cfg.CheckShapes(ctx, ask, time.Second); err != nil || unchecked != nil {
			t.Errorf("got %v, %v", unchecked, err)
		}
	})
	t.Run("mixed: a file error at the offering", func(t *testing.T) {
		cfg := parseWithOfferings(t, map[string][]cloudspec.Offering{
			"web": {{Zone: "ap-guangzhou-3", InstanceType: "S5.MEDIUM4"}, {Zone: "ap-guangzhou-3", InstanceType: "SR1.MEDIUM4"}, {Zone: "ap-guangzhou-6", InstanceType: "S5.MEDIUM4"}},
		})
		_, err := cfg.CheckShapes(ctx, ask, time.Second)
		var fe *Error
		if !errors.As(err, &fe) {
			t.Fatalf("got %v, want *Error", err)
		}
		want := []Problem{
			{Path: "instanceTemplates.web.offerings[1].instanceType", Line: 6, Msg: "SR1.MEDIUM4 (2 vCPU, 4 GiB, arm64) differs from offerings[0] S5.MEDIUM4 (2 vCPU, 4 GiB, amd64): the types of one template must have one shape"},
			{Path: "instanceTemplates.web.offerings[2].instanceType", Line: 6, Msg: "S5.MEDIUM4 is not offered in ap-guangzhou-6"},
		}
		if fe.File != "nodesmith.yaml" || !reflect.DeepEqual(fe.Problems, want) {
			t.Errorf("problems %+v\nwant %+v", fe.Problems, want)
		}
		if !strings.Contains(err.Error(), "configuration file nodesmith.yaml is invalid (2 problems)") {
			t.Errorf("error text %q", err)
		}
	})
	t.Run("not supported: warned per template, the next still asked", func(t *testing.T) {
		asked = nil
		calls := 0
		notSupported := func(ctx context.Context, tg cloudshapes.Target, zones, types []string) ([]cloudspec.Shape, error) {
			calls++
			return nil, fmt.Errorf("%w (tencentcloud)", cloudshapes.ErrNotSupported)
		}
		cfg := parseWithOfferings(t, map[string][]cloudspec.Offering{
			"web": {{Zone: "ap-guangzhou-3", InstanceType: "S5.MEDIUM4"}},
			"arm": {{Zone: "ap-guangzhou-3", InstanceType: "SR1.MEDIUM4"}},
		})
		unchecked, err := cfg.CheckShapes(ctx, notSupported, time.Second)
		if err != nil || calls != 2 || len(unchecked) != 2 ||
			unchecked[1] != `nodesmith.yaml: instance template "web": offerings not checked against the cloud's instance shapes: this cloud's adapter cannot tell instance shapes (tencentcloud)` {
			t.Errorf("got %q, %v after %d calls", unchecked, err, calls)
		}
	})
	t.Run("no adapter answering: warned, the rest not asked", func(t *testing.T) {
		calls := 0
		down := func(ctx context.Context, tg cloudshapes.Target, zones, types []string) ([]cloudspec.Shape, error) {
			calls++
			return nil, errors.New("no cloud adapter is answering")
		}
		cfg := parseWithOfferings(t, map[string][]cloudspec.Offering{
			"web": {{Zone: "ap-guangzhou-3", InstanceType: "S5.MEDIUM4"}, {Zone: "ap-guangzhou-3", InstanceType: "SR1.MEDIUM4"}},
			"arm": {{Zone: "ap-guangzhou-3", InstanceType: "SR1.MEDIUM4"}},
		})
		unchecked, err := cfg.CheckShapes(ctx, down, time.Second)
		if err != nil || calls != 1 || len(unchecked) != 2 || !strings.Contains(unchecked[0], `instance template "arm"`) ||
			!strings.HasSuffix(unchecked[1], "no cloud adapter is answering") {
			t.Errorf("got %q, %v after %d calls", unchecked, err, calls)
		}
	})
	t.Run("no offerings: nothing asked", func(t *testing.T) {
		cfg := parseWithOfferings(t, nil)
		if unchecked, err := cfg.CheckShapes(ctx, nil, time.Second); err != nil || unchecked != nil {
			t.Errorf("got %v, %v", unchecked, err)
		}
	})
}
