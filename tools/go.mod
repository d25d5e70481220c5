module github.com/nodesmith/nodesmith/tools

go 1.26.0

require (
	github.com/alibabacloud-go/darabonba-openapi/v2 v2.1.14
	github.com/alibabacloud-go/ecs-20140526/v7 v7.7.0
	github.com/alibabacloud-go/tea v1.3.13
	github.com/tencentcloud/tencentcloud-sdk-go/tencentcloud/common v1.1.0
	github.com/tencentcloud/tencentcloud-sdk-go/tencentcloud/cvm v1.1.0
	golang.org/x/crypto v0.58.0
)

require (
	github.com/alibabacloud-go/alibabacloud-gateway-spi v0.0.5 // indirect
	github.com/alibabacloud-go/debug v1.0.1 // indirect
	github.com/alibabacloud-go/tea-utils/v2 v2.0.7 // indirect
	github.com/aliyun/credentials-go v1.4.5 // indirect
	github.com/clbanning/mxj/v2 v2.7.0 // indirect
	github.com/json-iterator/go v1.1.12 // indirect
	github.com/modern-go/concurrent v0.0.0-20180306012644-bacd9c7ef1dd // indirect
	github.com/modern-go/reflect2 v1.0.2 // indirect
	github.com/tjfoc/gmsm v1.4.1 // indirect
	golang.org/x/net v0.60.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	google.golang.org/genproto v0.0.0-20261026165753-2ffab32bce7e // indirect
	gopkg.in/ini.v1 v1.67.0 // indirect
)
