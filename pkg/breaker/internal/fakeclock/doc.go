// Package fakeclock is the manual clock behind breakertest.Clock. It is a package of its own
// because the core's package-internal tests need it too: breakertest imports the core, so
// those tests cannot import breakertest without an import cycle.
package fakeclock
