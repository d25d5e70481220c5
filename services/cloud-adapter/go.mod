module github.com/nodesmith/nodesmith/services/cloud-adapter

go 1.26.0

require (
	github.com/nodesmith/nodesmith/libs v0.0.0
	github.com/nodesmith/nodesmith/proto v0.0.0
)

require (
	github.com/klauspost/compress v1.20.3 // indirect
	github.com/nats-io/nats.go v1.55.0 // indirect
	github.com/nats-io/nkeys v0.4.16 // indirect
	github.com/nats-io/nuid v1.0.1 // indirect
	github.com/prometheus/client_golang v1.25.0 // indirect
	github.com/tencentcloud/tencentcloud-sdk-go/tencentcloud/cvm v1.1.0 // indirect
	golang.org/x/crypto v0.58.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/time v0.16.0 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)

replace (
	github.com/nodesmith/nodesmith/libs => ../../libs
	github.com/nodesmith/nodesmith/proto => ../../proto
)
