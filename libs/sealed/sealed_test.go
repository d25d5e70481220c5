package sealed_test

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodesmith/nodesmith/libs/sealed"
)

func key(t *testing.T, b byte) *sealed.Key {
	t.Helper()
	k, err := sealed.NewKey(bytes.Repeat([]byte{b}, sealed.KeySize))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestCredentialsRoundTripAndBinding(t *testing.T) {
	k := key(t, 1)
	c := sealed.Credentials{KeyID: "AKIDx", Secret: "very-secret"}
	blob, err := k.SealCredentials("team", c)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(blob, []byte("very-secret")) || bytes.Contains(blob, []byte("AKIDx")) {
		t.Fatal("the blob holds the plaintext")
	}
	got, err := k.OpenCredentials("team", blob, k.ID())
	if err != nil || got != c {
		t.Fatalf("OpenCredentials = %v, %v", got == c, err)
	}
	// The sealed plaintext keeps its JSON names (secretId, secretKey,
	// token), so credentials stored before the neutral Go names open,
	// and a security token travels with them.
	old, err := k.Seal([]byte(`{"secretId":"LTAI-id","secretKey":"s","token":"sts"}`), []byte("ali"))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := k.OpenCredentials("ali", old, k.ID()); err != nil || got != (sealed.Credentials{KeyID: "LTAI-id", Secret: "s", SecurityToken: "sts"}) {
		t.Fatalf("credentials in the stored format: %v", err)
	}
	sts := sealed.Credentials{KeyID: "STS.id", Secret: "s", SecurityToken: "tok"}
	blob2, _ := k.SealCredentials("ali", sts)
	if pt, err := k.Open(blob2, k.ID(), []byte("ali")); err != nil || string(pt) != `{"secretId":"STS.id","secretKey":"s","token":"tok"}` {
		t.Fatalf("sealed plaintext changed: %s %v", pt, err)
	}
	tests := []struct {
		name    string
		key     *sealed.Key
		account string
		blob    []byte
		keyID   string
		want    error
	}{
		{"another account", k, "other", blob, k.ID(), sealed.ErrCorrupt},
		{"another key, id given", key(t, 2), "team", blob, k.ID(), sealed.ErrKeyMismatch},
		{"another key, no id", key(t, 2), "team", blob, "", sealed.ErrCorrupt},
		{"tampered", k, "team", append(bytes.Clone(blob[:len(blob)-1]), blob[len(blob)-1]^1), k.ID(), sealed.ErrCorrupt},
		{"truncated", k, "team", blob[:5], k.ID(), sealed.ErrCorrupt},
		{"empty", k, "team", nil, "", sealed.ErrCorrupt},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.key.OpenCredentials(tc.account, tc.blob, tc.keyID)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			if strings.Contains(err.Error(), "very-secret") {
				t.Fatal("the error shows the secret")
			}
		})
	}
}

func TestSealingTwiceDiffers(t *testing.T) {
	k := key(t, 3)
	a, _ := k.Seal([]byte("x"), []byte("a"))
	b, _ := k.Seal([]byte("x"), []byte("a"))
	if bytes.Equal(a, b) {
		t.Fatal("two seals of the same plaintext are equal: nonce reuse")
	}
}

func TestKeyFiles(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sub", "secrets.key")
	k1, err := sealed.GenerateKeyFile(path)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode = %v, %v; want 0600", fi.Mode().Perm(), err)
	}
	k2, err := sealed.GenerateKeyFile(path) // exists: reused
	if err != nil || k2.ID() != k1.ID() {
		t.Fatalf("second GenerateKeyFile: id %s vs %s, %v", k2.ID(), k1.ID(), err)
	}
	k3, err := sealed.LoadKeyFile(path)
	if err != nil || k3.ID() != k1.ID() {
		t.Fatalf("LoadKeyFile: %v", err)
	}
	if fmt.Sprint(k1) != "sealed.Key("+k1.ID()+")" {
		t.Errorf("a key prints as %q", fmt.Sprint(k1))
	}
	if fmt.Sprintf("%v %+v", sealed.Credentials{Secret: "s3"}, sealed.Credentials{Secret: "s3"}) != "[redacted] [redacted]" {
		t.Error("credentials print their values")
	}
	for name, content := range map[string]string{
		"short": base64.StdEncoding.EncodeToString([]byte("short")),
		"not64": "not base64 at all!",
		"empty": "",
		"long":  base64.StdEncoding.EncodeToString(make([]byte, 64)),
	} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := sealed.LoadKeyFile(p); err == nil {
			t.Errorf("%s: LoadKeyFile accepted %q", name, content)
		} else if content != "" && strings.Contains(err.Error(), content) {
			t.Errorf("%s: error echoes the file: %v", name, err)
		}
	}
	if _, err := sealed.LoadKeyFile(filepath.Join(dir, "missing")); err == nil {
		t.Error("LoadKeyFile of a missing file succeeded")
	}
	raw := bytes.Repeat([]byte{7}, 32)
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawURLEncoding} {
		if _, err := sealed.ParseKey(" " + enc.EncodeToString(raw) + "\n"); err != nil {
			t.Errorf("ParseKey: %v", err)
		}
	}
}
