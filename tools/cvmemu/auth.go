package cvmemu

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

const (
	tc3Algorithm     = "TC3-HMAC-SHA256"
	unsignedPayload  = "UNSIGNED-PAYLOAD"
	tc3RequestSuffix = "tc3_request"
)

// tc3Auth is a parsed Authorization header:
// "TC3-HMAC-SHA256 Credential=ID/DATE/SERVICE/tc3_request, SignedHeaders=a;b, Signature=hex".
type tc3Auth struct {
	secretID      string
	date          string
	service       string
	signedHeaders []string
	signature     string
}

func parseTC3Authorization(h string) (tc3Auth, *apiError) {
	bad := func(why string) (tc3Auth, *apiError) {
		return tc3Auth{}, errf(CodeAuthInvalidAuthorization, "The Authorization header is invalid: %s.", why)
	}
	if strings.TrimSpace(h) == "" {
		return bad("the header is missing")
	}
	f, why := parseAuthorization(h, tc3Algorithm)
	if why != "" {
		return bad(why)
	}
	a := tc3Auth{signature: f.signature, signedHeaders: f.signedHeaders}
	scope := strings.Split(f.credential, "/")
	if len(scope) != 4 || scope[0] == "" || scope[3] != tc3RequestSuffix {
		return bad("Credential must be SecretId/Date/Service/tc3_request")
	}
	a.secretID, a.date, a.service = scope[0], scope[1], scope[2]
	if !slices.Contains(a.signedHeaders, "host") || !slices.Contains(a.signedHeaders, "content-type") {
		return bad("SignedHeaders must include content-type and host")
	}
	return a, nil
}

// authFields are the fields of an Authorization header of the form
// "<algorithm> Credential=...,SignedHeaders=a;b,Signature=..." that both
// clouds' signatures use.
type authFields struct {
	credential, signature string
	signedHeaders         []string
}

// parseAuthorization splits such a header; why says what is wrong with it.
func parseAuthorization(h, algorithm string) (authFields, string) {
	var f authFields
	h = strings.TrimSpace(h)
	if h == "" {
		return f, "the header is missing"
	}
	alg, rest, ok := strings.Cut(h, " ")
	if !ok || alg != algorithm {
		return f, "only " + algorithm + " is supported"
	}
	var signed string
	for part := range strings.SplitSeq(rest, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return f, "malformed field " + strconv.Quote(part)
		}
		switch k {
		case "Credential":
			f.credential = v
		case "SignedHeaders":
			signed = v
		case "Signature":
			f.signature = v
		}
	}
	if f.credential == "" || signed == "" || f.signature == "" {
		return f, "Credential, SignedHeaders and Signature are required"
	}
	f.signedHeaders = strings.Split(signed, ";")
	for _, sh := range f.signedHeaders {
		if sh == "" || sh != strings.ToLower(sh) {
			return f, "SignedHeaders must be lower case"
		}
	}
	return f, ""
}

// verifySignature authenticates a request signed with TC3-HMAC-SHA256 and
// returns the SecretId. The checks follow the order of the real gateway:
// header syntax, timestamp freshness, SecretId, then the signature itself.
func (e *Emulator) verifySignature(r *http.Request, body []byte, timestamp int64) (string, *apiError) {
	auth, aerr := parseTC3Authorization(r.Header.Get("Authorization"))
	if aerr != nil {
		return "", aerr
	}
	now := e.now()
	reqTime := time.Unix(timestamp, 0)
	if skew := now.Sub(reqTime); skew > e.cfg.MaxClockSkew || -skew > e.cfg.MaxClockSkew {
		return "", errf(CodeAuthSignatureExpire,
			"Signature expire. Now server time is %d, request timestamp is %d; they must be within %s.",
			now.Unix(), timestamp, e.cfg.MaxClockSkew)
	}
	secretKey, ok := e.cfg.Credentials[auth.secretID]
	if !ok {
		return "", errf(CodeAuthSecretIDNotFound, "The SecretId is not found, please ensure that your SecretId is correct.")
	}
	if token := r.Header.Get("X-TC-Token"); token != "" {
		return "", errf(CodeAuthTokenFailure, "Temporary credentials (X-TC-Token) are not supported by the emulator.")
	}
	date := reqTime.UTC().Format("2006-01-02")
	if auth.date != date || auth.service != Service {
		return "", errf(CodeAuthSignatureFailure,
			"The provided credentials could not be validated: credential scope %s/%s does not match %s/%s.",
			auth.date, auth.service, date, Service)
	}

	// The documented canonical form lower-cases header values; the Go SDK
	// signs them as sent. Accept either so both kinds of client work.
	var exact, lowered strings.Builder
	for _, name := range auth.signedHeaders {
		v := r.Header.Get(name)
		if name == "host" {
			v = r.Host // net/http moves Host out of the header map
		}
		v = strings.TrimSpace(v)
		exact.WriteString(name + ":" + v + "\n")
		lowered.WriteString(name + ":" + strings.ToLower(v) + "\n")
	}
	payloadHash := sha256Hex(body)
	if r.Header.Get("X-TC-Content-SHA256") == unsignedPayload {
		payloadHash = sha256Hex([]byte(unsignedPayload))
	}
	got := []byte(strings.ToLower(auth.signature))
	for _, headers := range []string{exact.String(), lowered.String()} {
		want := tc3Signature(secretKey, r.Method, r.URL, headers, auth.signedHeaders, payloadHash, timestamp, date)
		if hmac.Equal([]byte(want), got) {
			return auth.secretID, nil
		}
	}
	return "", errf(CodeAuthSignatureFailure,
		"The provided credentials could not be validated. Please check your signature is correct.")
}

// tc3Signature computes the hex TC3-HMAC-SHA256 signature of a request.
func tc3Signature(secretKey, method string, u *url.URL, canonicalHeaders string, signedHeaders []string,
	payloadHash string, timestamp int64, date string) string {
	path := u.Path
	if path == "" {
		path = "/"
	}
	canonicalRequest := strings.Join([]string{
		method,
		path,
		u.RawQuery,
		canonicalHeaders,
		strings.Join(signedHeaders, ";"),
		payloadHash,
	}, "\n")
	stringToSign := strings.Join([]string{
		tc3Algorithm,
		strconv.FormatInt(timestamp, 10),
		date + "/" + Service + "/" + tc3RequestSuffix,
		sha256Hex([]byte(canonicalRequest)),
	}, "\n")
	secretDate := hmacSHA256([]byte("TC3"+secretKey), date)
	secretService := hmacSHA256(secretDate, Service)
	secretSigning := hmacSHA256(secretService, tc3RequestSuffix)
	return hex.EncodeToString(hmacSHA256(secretSigning, stringToSign))
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func hmacSHA256(key []byte, msg string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(msg))
	return m.Sum(nil)
}
