module github.com/fusebox-dev/fusebox/pkg/breaker

go 1.26.0
