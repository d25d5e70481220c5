package cvmemu

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"time"
)

// ECS requests are signed with ACS3-HMAC-SHA256 (signature v3), what the
// darabonba-openapi client the official ECS SDK is built on sends unless
// told otherwise: an Authorization header
//
//	ACS3-HMAC-SHA256 Credential=<AccessKeyId>,SignedHeaders=a;b,Signature=<hex>
//
// over a canonical request made of the method, path, sorted query, the
// signed headers (host and every x-acs-* one) and the hex SHA-256 of the
// body, which x-acs-content-sha256 also carries. The signature is the hex
// HMAC-SHA256 of "ACS3-HMAC-SHA256\n" + hex(SHA-256(canonical request)),
// keyed with the AccessKeySecret.

const acs3Algorithm = "ACS3-HMAC-SHA256"

// acs3Auth is a parsed Authorization header.
type acs3Auth struct {
	accessKeyID   string
	signedHeaders []string
	signature     string
}

func parseACS3Authorization(h string) (acs3Auth, *apiError) {
	bad := func(why string) (acs3Auth, *apiError) {
		return acs3Auth{}, errf(ecsCodeIncompleteSignature, "The request signature does not conform to Aliyun standards: %s.", why)
	}
	h = strings.TrimSpace(h)
	if h == "" {
		return bad("the Authorization header is missing")
	}
	alg, rest, ok := strings.Cut(h, " ")
	if !ok || alg != acs3Algorithm {
		return bad("only " + acs3Algorithm + " is supported")
	}
	var a acs3Auth
	var signed string
	for part := range strings.SplitSeq(rest, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return bad("malformed field " + part)
		}
		switch k {
		case "Credential":
			a.accessKeyID = v
		case "SignedHeaders":
			signed = v
		case "Signature":
			a.signature = v
		}
	}
	if a.accessKeyID == "" || signed == "" || a.signature == "" {
		return bad("Credential, SignedHeaders and Signature are required")
	}
	a.signedHeaders = strings.Split(signed, ";")
	for _, sh := range a.signedHeaders {
		if sh == "" || sh != strings.ToLower(sh) {
			return bad("SignedHeaders must be lower case")
		}
	}
	if !slices.IsSorted(a.signedHeaders) {
		return bad("SignedHeaders must be sorted")
	}
	for _, must := range []string{"host", "x-acs-date", "x-acs-signature-nonce", "x-acs-content-sha256"} {
		if !slices.Contains(a.signedHeaders, must) {
			return bad("SignedHeaders must include " + must)
		}
	}
	return a, nil
}

// verifyACS3 authenticates an ECS request and returns its AccessKeyId. The
// checks follow the real gateway: syntax, timestamp, AccessKeyId, nonce,
// then the signature.
func (e *Emulator) verifyACS3(r *http.Request, body []byte) (string, *apiError) {
	auth, aerr := parseACS3Authorization(r.Header.Get("Authorization"))
	if aerr != nil {
		return "", aerr
	}
	date := r.Header.Get("x-acs-date")
	ts, err := time.Parse("2006-01-02T15:04:05Z", date)
	if err != nil {
		return "", errf(ecsCodeInvalidTimeStampFormat, "Specified time stamp or date value is not well formatted (x-acs-date %q).", date)
	}
	now := e.now()
	if skew := now.Sub(ts); skew > e.cfg.MaxClockSkew || -skew > e.cfg.MaxClockSkew {
		return "", errf(ecsCodeInvalidTimeStampExpired,
			"Specified time stamp or date value is expired: %s, server time %s, allowed skew %s.",
			date, now.UTC().Format("2006-01-02T15:04:05Z"), e.cfg.MaxClockSkew)
	}
	secret, ok := e.cfg.Credentials[auth.accessKeyID]
	if !ok {
		return "", errf(ecsCodeAccessKeyNotFound, "Specified access key is not found.")
	}
	if r.Header.Get("x-acs-security-token") != "" {
		return "", errf(ecsCodeSecurityTokenMalformed, "Temporary credentials (STS security tokens) are not supported by the emulator.")
	}
	if r.Header.Get("x-acs-content-sha256") != sha256Hex(body) {
		return "", errf(ecsCodeSignatureMismatch, "Specified signature is not matched with our calculation: x-acs-content-sha256 is not the SHA-256 of the body.")
	}
	want := acs3Signature(secret, r, auth.signedHeaders, sha256Hex(body))
	if !hmac.Equal([]byte(want), []byte(strings.ToLower(auth.signature))) {
		return "", errf(ecsCodeSignatureMismatch, "Specified signature is not matched with our calculation.")
	}
	// The nonce is spent only by a correctly signed request, so a forged
	// one cannot burn a client's nonces.
	if !e.spendNonce(auth.accessKeyID+"/"+r.Header.Get("x-acs-signature-nonce"), ts) {
		return "", errf(ecsCodeSignatureNonceUsed, "Specified signature nonce was used already.")
	}
	return auth.accessKeyID, nil
}

// spendNonce records a signature nonce; false if it was seen within the
// clock skew window (older ones are rejected as expired anyway).
func (e *Emulator) spendNonce(key string, ts time.Time) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.now()
	if len(e.nonces) >= 1024 { // amortised pruning keeps the map bounded by the request rate
		for k, t := range e.nonces {
			if now.Sub(t) > e.cfg.MaxClockSkew {
				delete(e.nonces, k)
			}
		}
	}
	if _, used := e.nonces[key]; used {
		return false
	}
	e.nonces[key] = ts
	return true
}

// acs3Signature computes the hex ACS3-HMAC-SHA256 signature of r.
func acs3Signature(secret string, r *http.Request, signedHeaders []string, payloadHash string) string {
	path := r.URL.EscapedPath()
	if path == "" {
		path = "/"
	}
	var headers strings.Builder
	for _, name := range signedHeaders {
		vals := r.Header.Values(name)
		if name == "host" {
			vals = []string{r.Host} // net/http moves Host out of the header map
		}
		trimmed := make([]string, 0, len(vals))
		for _, v := range vals {
			trimmed = append(trimmed, strings.TrimSpace(v))
		}
		sort.Strings(trimmed)
		headers.WriteString(name + ":" + strings.Join(trimmed, ",") + "\n")
	}
	canonical := strings.Join([]string{
		r.Method,
		path,
		canonicalQuery(r.URL.Query()),
		headers.String(),
		strings.Join(signedHeaders, ";"),
		payloadHash,
	}, "\n")
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(acs3Algorithm + "\n" + sha256Hex([]byte(canonical))))
	return hex.EncodeToString(m.Sum(nil))
}

// canonicalQuery sorts the parameters and percent-encodes them (RFC 3986:
// space as %20, '*' encoded, '~' not).
func canonicalQuery(q url.Values) string {
	keys := make([]string, 0, len(q))
	for k := range q {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		vals := slices.Clone(q[k])
		sort.Strings(vals)
		for _, v := range vals {
			parts = append(parts, percentEncode(k)+"="+percentEncode(v))
		}
	}
	return strings.Join(parts, "&")
}

func percentEncode(s string) string {
	s = url.QueryEscape(s)
	s = strings.ReplaceAll(s, "+", "%20")
	s = strings.ReplaceAll(s, "*", "%2A")
	return strings.ReplaceAll(s, "%7E", "~")
}
