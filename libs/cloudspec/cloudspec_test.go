package cloudspec

import (
	"bytes"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"testing"
)

func mustLookup(t *testing.T, name string) Provider {
	t.Helper()
	p, ok := Lookup(name)
	if !ok {
		t.Fatalf("Lookup(%q) failed", name)
	}
	return p
}

func TestLookupAndNames(t *testing.T) {
	if got := Names(); !reflect.DeepEqual(got, []string{Alibaba, Tencent}) {
		t.Fatalf("Names = %v", got)
	}
	for _, n := range []string{"", "tencent", "TencentCloud", "aws"} {
		if _, ok := Lookup(n); ok {
			t.Errorf("Lookup(%q) succeeded", n)
		}
		if err := CheckName(n); err == nil || !strings.Contains(err.Error(), "alibabacloud, tencentcloud") {
			t.Errorf("CheckName(%q) = %v", n, err)
		}
	}
	if DefaultProvider != "tencentcloud" || mustLookup(t, Tencent).Name != "tencentcloud" || mustLookup(t, Alibaba).Name != "alibabacloud" {
		t.Fatal("provider names changed")
	}
	if c := mustLookup(t, Tencent).Credentials; c != (CredentialNames{"SecretId", "SecretKey", "Token"}) {
		t.Errorf("Tencent credential names %+v", c)
	}
	if c := mustLookup(t, Alibaba).Credentials; c != (CredentialNames{"AccessKeyId", "AccessKeySecret", "SecurityToken"}) {
		t.Errorf("Alibaba credential names %+v", c)
	}
	if (Credentials{KeyID: "a"}).Valid() || (Credentials{Secret: "b"}).Valid() || !(Credentials{KeyID: "a", Secret: "b"}).Valid() {
		t.Error("Credentials.Valid")
	}
}

func TestProviderID(t *testing.T) {
	for _, tc := range []struct {
		provider, region, zone, id, want string
	}{
		{Tencent, "ap-guangzhou", "ap-guangzhou-3", "ins-abc123", "qcloud:///ap-guangzhou-3/ins-abc123"},
		{Alibaba, "cn-hangzhou", "cn-hangzhou-h", "i-bp1abc", "cn-hangzhou.i-bp1abc"},
	} {
		p := mustLookup(t, tc.provider)
		got := p.ProviderID(tc.region, tc.zone, tc.id)
		if got != tc.want {
			t.Errorf("%s ProviderID = %q, want %q", tc.provider, got, tc.want)
		}
		parts, ok := p.ParseProviderID(got)
		if !ok || parts.CloudID != tc.id || !parts.InRegion(tc.region) || parts.InRegion("eu-central") {
			t.Errorf("%s ParseProviderID(%q) = %+v %v", tc.provider, got, parts, ok)
		}
		if id, ok := p.CloudIDFromProviderID(got); !ok || id != tc.id {
			t.Errorf("%s CloudIDFromProviderID(%q) = %q %v", tc.provider, got, id, ok)
		}
	}
}

func TestParseProviderID(t *testing.T) {
	for _, tc := range []struct {
		provider, pid string
		ok            bool
		want          ProviderIDParts
	}{
		{Tencent, "qcloud:///ap-guangzhou-3/ins-abc", true, ProviderIDParts{Zone: "ap-guangzhou-3", CloudID: "ins-abc"}},
		{Tencent, "qcloud:///ap-guangzhou-3/i-abc", false, ProviderIDParts{}},
		{Tencent, "qcloud://ap-guangzhou-3/ins-abc", false, ProviderIDParts{}},
		{Tencent, "qcloud:///ap-guangzhou-3/ins-abc/x", false, ProviderIDParts{}},
		{Tencent, "qcloud:///AP/ins-abc", false, ProviderIDParts{}},
		{Tencent, "cn-hangzhou.i-abc", false, ProviderIDParts{}},
		{Tencent, "", false, ProviderIDParts{}},
		{Alibaba, "cn-hangzhou.i-bp1abc", true, ProviderIDParts{Region: "cn-hangzhou", CloudID: "i-bp1abc"}},
		{Alibaba, "alicloud://cn-hangzhou.i-bp1abc", true, ProviderIDParts{Region: "cn-hangzhou", CloudID: "i-bp1abc"}},
		{Alibaba, "cn-hangzhou.ins-abc.x", false, ProviderIDParts{}},
		{Alibaba, "cn-hangzhou.ins-abc", false, ProviderIDParts{}},
		{Alibaba, ".i-abc", false, ProviderIDParts{}},
		{Alibaba, "cn-hangzhou.", false, ProviderIDParts{}},
		{Alibaba, "qcloud:///ap-guangzhou-3/ins-abc", false, ProviderIDParts{}},
		{Alibaba, "aws:///cn-hangzhou.i-abc", false, ProviderIDParts{}},
	} {
		got, ok := mustLookup(t, tc.provider).ParseProviderID(tc.pid)
		if ok != tc.ok || got != tc.want {
			t.Errorf("%s ParseProviderID(%q) = %+v %v, want %+v %v", tc.provider, tc.pid, got, ok, tc.want, tc.ok)
		}
	}
}

func TestInRegion(t *testing.T) {
	for _, tc := range []struct {
		parts  ProviderIDParts
		region string
		want   bool
	}{
		{ProviderIDParts{Zone: "ap-guangzhou-3"}, "ap-guangzhou", true},
		{ProviderIDParts{Zone: "ap-guangzhou-3"}, "ap-guang", false},
		{ProviderIDParts{Zone: "ap-guangzhou-"}, "ap-guangzhou", false},
		{ProviderIDParts{Zone: "ap-guangzhou-3"}, "", false},
		{ProviderIDParts{Region: "cn-hangzhou"}, "cn-hangzhou", true},
		{ProviderIDParts{Region: "cn-hangzhou"}, "cn-hangzhou-h", false},
		{ProviderIDParts{Region: "cn-hangzhou", Zone: "cn-beijing-a"}, "cn-hangzhou", true},
	} {
		if got := tc.parts.InRegion(tc.region); got != tc.want {
			t.Errorf("%+v.InRegion(%q) = %v", tc.parts, tc.region, got)
		}
	}
}

func TestCredentialsHideTheirValues(t *testing.T) {
	c := Credentials{KeyID: "LTAIkeyid", Secret: "s3cr3t", SecurityToken: "t0ken"}
	var logs bytes.Buffer
	slog.New(slog.NewJSONHandler(&logs, nil)).Info("x", "creds", c)
	out := fmt.Sprintf("%v %+v %#v %s", c, c, c, c) + logs.String()
	for _, v := range []string{"LTAIkeyid", "s3cr3t", "t0ken"} {
		if strings.Contains(out, v) {
			t.Fatalf("%q printed: %s", v, out)
		}
	}
	if !c.Equal(c) || c.Equal(Credentials{KeyID: "LTAIkeyid", Secret: "s3cr3t"}) {
		t.Error("Equal")
	}
}
