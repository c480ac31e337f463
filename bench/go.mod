module github.com/fusebox-dev/fusebox/bench

go 1.26.0

require (
	github.com/failsafe-go/failsafe-go v0.9.7
	github.com/fusebox-dev/fusebox/pkg/breaker v0.0.0-00010101000000-000000000000
	github.com/sony/gobreaker/v2 v2.4.0
)

require github.com/bits-and-blooms/bitset v1.24.4 // indirect
