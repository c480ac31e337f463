// Package circuitbreaker is the admission webhook of CircuitBreakers: it fills in
// their defaults explicitly, refuses what the CRD's schema and CEL rules cannot
// judge, and warns about settings that are legal but risky.
//
// The API server refuses out-of-bounds values itself (OpenAPI schema and CEL,
// api/v1alpha1); nothing here repeats those bounds. What this package adds:
//
//   - Defaults: every unset spec field gets its v1alpha1 Default* value, so the
//     stored object says what the breaker does even where the schema default
//     did not apply.
//   - Refusals, with field paths: a name whose ConfigMap key <name>.json would not
//     be a valid key (longer than 253 characters), and durations that are not a
//     whole number of milliseconds. On update a refusal applies only to a field
//     the update changes, so an object stored before a rule existed can still be
//     updated (and its finalizers removed).
//   - Warnings, for legal but risky settings: see [Warnings].
package circuitbreaker
