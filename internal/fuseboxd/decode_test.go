package fuseboxd

import (
	"bytes"
	"testing"
)

// referenceAcquire and referenceSettle decode as the daemon did before scanFlatObject,
// with encoding/json alone.
func referenceAcquire(body []byte) (acquireBody, error) {
	if len(bytes.TrimSpace(body)) == 0 {
		return acquireBody{}, nil
	}
	var req struct {
		LeaseMs *int64 `json:"leaseMs"`
	}
	if err := decodeJSON(body, &req); err != nil {
		return acquireBody{}, err
	}
	if req.LeaseMs == nil {
		return acquireBody{}, nil
	}
	return acquireBody{leaseMs: *req.LeaseMs, hasLease: true}, nil
}

func referenceSettle(body []byte) (settleBody, error) {
	var req struct {
		Outcome    string `json:"outcome"`
		DurationMs *int64 `json:"durationMs"`
	}
	if err := decodeJSON(body, &req); err != nil {
		return settleBody{}, err
	}
	b := settleBody{outcome: req.Outcome}
	if req.DurationMs != nil {
		b.durationMs, b.hasDuration = *req.DurationMs, true
	}
	return b, nil
}

// FuzzDecodeBodies: whatever the body, the decoders without reflection mean what
// encoding/json means: the same fields, and an error exactly when it has one (with
// its message, since they fall back to it).
func FuzzDecodeBodies(f *testing.F) {
	for _, seed := range []string{
		``, ` `, `{}`, `{"leaseMs":30000}`, ` { "leaseMs" : -1 } `, `{"leaseMs":0100}`, `{"leaseMs":1e3}`,
		`{"leaseMs":123456789012345678}`, `{"leaseMs":1234567890123456789}`, `{"LEASEMS":5}`, `{"leaseMs":"5"}`,
		`{"outcome":"success","durationMs":3}`, `{"outcome":"failure"}`, `{"outcome":"f\u0061ilure"}`,
		`{"durationMs":1,"outcome":"ignored","outcome":"success"}`, `{"outcome":"x"} {}`, `{"outcome":"x"}x`,
		`{"outcome":null}`, `{"outcome":"a\tb"}`, `{"outcome":"é"}`, `{"durationMs":-0}`, `{,}`, `{"a":1,}`,
		"{\"outcome\":\"success\"}\n", `[]`, `"x"`, `{"outcome":"success"`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		a, errA := decodeAcquire(body)
		ra, refA := referenceAcquire(body)
		if a != ra || (errA == nil) != (refA == nil) || errA != nil && errA.Error() != refA.Error() {
			t.Errorf("acquire %q: %+v %v, encoding/json: %+v %v", body, a, errA, ra, refA)
		}
		s, errS := decodeSettle(body)
		rs, refS := referenceSettle(body)
		if s != rs || (errS == nil) != (refS == nil) || errS != nil && errS.Error() != refS.Error() {
			t.Errorf("settle %q: %+v %v, encoding/json: %+v %v", body, s, errS, rs, refS)
		}
	})
}

// The decoders of the frequent bodies allocate nothing.
func TestDecodeAllocatesNothing(t *testing.T) {
	settle, lease := []byte(`{"outcome":"success","durationMs":12}`), []byte(`{"leaseMs":5000}`)
	if n := testing.AllocsPerRun(100, func() {
		if b, err := decodeSettle(settle); err != nil || b.outcome != "success" || b.durationMs != 12 {
			t.Fatal(b, err)
		}
		if b, err := decodeAcquire(lease); err != nil || b.leaseMs != 5000 {
			t.Fatal(b, err)
		}
	}); n != 0 {
		t.Errorf("%v allocations per decode, want 0", n)
	}
}
