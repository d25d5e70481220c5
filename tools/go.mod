module github.com/nodesmith/nodesmith/tools

go 1.26.0

require (
	github.com/tencentcloud/tencentcloud-sdk-go/tencentcloud/common v1.1.0
	github.com/tencentcloud/tencentcloud-sdk-go/tencentcloud/cvm v1.1.0
	github.com/tencentcloud/tencentcloud-sdk-go/tencentcloud/tag v1.1.0
	golang.org/x/crypto v0.58.0
)

require golang.org/x/sys v0.49.0 // indirect
