package redisstore_test

import (
	"context"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
	"github.com/fusebox-dev/fusebox/pkg/breaker/redisstore"
)

// Share one breaker's verdict between every process that uses the key "payments".
func Example() {
	client := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer client.Close()

	// New does not contact Redis: if it is down, breakers decide alone until it is back.
	// Keys are "shop:breaker:checkout:<key>": every replica of checkout shares its
	// verdicts, and another application's breaker named "payments" is another key.
	store, err := redisstore.New(client, redisstore.WithPrefix("shop:breaker:"),
		redisstore.WithApplication("checkout"))
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	// The store must observe the breaker, and know its key.
	payments, err := breaker.New("payments", breaker.DefaultPolicy(), breaker.WithObserver(store))
	if err != nil {
		log.Fatal(err)
	}
	if err := store.Attach(payments, "payments"); err != nil {
		log.Fatal(err)
	}

	err = payments.Execute(context.Background(), func(ctx context.Context) error {
		return nil // call the payments service
	})
	if err != nil {
		log.Print(err)
	}
}

// Every breaker of a registry shares its verdict under its name.
func ExampleStore_NewRegistry() {
	client := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer client.Close()
	store, err := redisstore.New(client, redisstore.WithTTL(time.Hour))
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	breakers, err := store.NewRegistry(breaker.DefaultPolicy())
	if err != nil {
		log.Fatal(err)
	}
	_ = breakers.Get("payments").Execute(context.Background(), func(context.Context) error { return nil })

	if st := store.Stats(); !st.Healthy {
		log.Printf("Redis unreachable (%d failed round trips): deciding alone", st.Errors)
	}
}
