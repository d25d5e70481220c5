package tencent

import (
	"context"

	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/domain"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/ports"
)

// CodeTagUnsupported is the code of Tag's refusal on Tencent.
const CodeTagUnsupported = "TagNotSupported"

// Tag implements ports.Cloud. CVM has no call that changes the tags of an
// existing instance: that is the Tag service's TagResources (resource names
// qcs::cvm:<region>:uin/<owner uin>:instance/<id>), which needs the
// account's owner uin and its own client; it is not wired yet. Tag refuses
// with an invalid-parameters error, which an explicit adoption reports per
// VM: the adopted records are written before tagging, and an adopted VM
// without nodesmith's tags is still terminated on scale-down (see
// domain.MayTerminate), so the adoption holds without the tags.
func (c *Cloud) Tag(ctx context.Context, _ ports.Target, ids []string, _ []domain.Tag) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return ports.NewInvalidParametersError(CodeTagUnsupported,
		"tagging existing Tencent CVM instances is not supported yet (Tag service TagResources); the VMs keep their tags")
}
