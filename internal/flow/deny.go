package flow

import (
	"encoding/json"
	"net/http"

	"github.com/sluicehq/sluice/core"
)

// ProblemType is the "type" of the problem details written by DenyProblem:
// the "quota exceeded" problem type that the RateLimit headers draft
// registers, whose "violated-policies" member lists the rules that denied.
const ProblemType = "https://iana.org/assignments/http-problem-types#quota-exceeded"

// DenyPlain answers 429 Too Many Requests with a text/plain body.
func DenyPlain(w http.ResponseWriter, _ *http.Request, _ core.Result) {
	plainError(w, bodyTooManyRequests, http.StatusTooManyRequests)
}

// The bodies of the flow's own text/plain answers (see plainError).
var (
	bodyTooManyRequests = []byte("Too Many Requests\n")
	bodyLate            = []byte("Service Unavailable: request deadline exceeded\n")
	bodyBadKey          = []byte("Bad Request: cannot identify the client for rate limiting\n")
	bodyUnavailable     = []byte("Service Unavailable: rate limiter unavailable\n")
)

// plainError answers as http.Error does, with the same headers, status
// and body (body ends with its newline), for one allocation, one array for
// both header values, instead of http.Error's three and its fmt call.
// (Write must neither keep nor change body, so the bodies are shared.)
func plainError(w http.ResponseWriter, body []byte, code int) {
	h := w.Header()
	h.Del("Content-Length") // may be for other content, as http.Error says
	vals := []string{"text/plain; charset=utf-8", "nosniff"}
	h["Content-Type"], h["X-Content-Type-Options"] = vals[0:1:1], vals[1:2:2]
	w.WriteHeader(code)
	w.Write(body)
}

// problem is an RFC 9457 problem details object.
type problem struct {
	Type             string   `json:"type"`
	Title            string   `json:"title"`
	Status           int      `json:"status"`
	Detail           string   `json:"detail"`
	ViolatedPolicies []string `json:"violated-policies"`
}

// DenyProblem answers 429 with an RFC 9457 application/problem+json body
// naming the violated policies (the rules that denied).
func DenyProblem(w http.ResponseWriter, _ *http.Request, res core.Result) {
	p := problem{
		Type:             ProblemType,
		Title:            "Too Many Requests",
		Status:           http.StatusTooManyRequests,
		Detail:           "Rate limit exceeded; retry in " + Seconds(RetryAfterSeconds(res)) + ".",
		ViolatedPolicies: Violated(res),
	}
	body, _ := json.Marshal(p) // cannot fail: strings and ints only
	h := w.Header()
	h.Del("Content-Length") // may be for other content, as plainError says
	h.Set("Content-Type", "application/problem+json")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusTooManyRequests)
	w.Write(append(body, '\n'))
}

// Seconds returns "1 second" or "<n> seconds".
func Seconds(n int64) string {
	if n == 1 {
		return "1 second"
	}
	return itoa(n) + " seconds"
}

// Violated returns the names of the rules that denied res.
func Violated(res core.Result) []string {
	names := []string{}
	for _, rr := range res.Rules {
		if !rr.Allowed {
			names = append(names, rr.Name)
		}
	}
	if len(names) == 0 && res.Rule != "" {
		names = append(names, res.Rule)
	}
	return names
}
