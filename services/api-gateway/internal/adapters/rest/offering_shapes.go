package rest

import (
	"context"
	"net/http"

	"github.com/nodesmith/nodesmith/libs/cloudshapes"
	"github.com/nodesmith/nodesmith/libs/cloudspec"
	"github.com/nodesmith/nodesmith/libs/contract"
	"github.com/nodesmith/nodesmith/libs/restapi"

	"github.com/nodesmith/nodesmith/services/api-gateway/internal/app"
	"github.com/nodesmith/nodesmith/services/api-gateway/internal/domain"
)

// checkOfferingShapes checks a template's offerings against the cloud's
// instance shapes (issue 16: Cluster Autoscaler needs one shape per
// group): a type not offered in its zone, or of another shape than the
// first offering's, is a 422 naming the offering's field. When the
// question cannot be answered (no cloud adapter answering within
// cloudshapes.Timeout, a cloud whose adapter cannot tell) the template is
// accepted with a 299 Warning saying why. A template without offerings
// (or no template) asks nothing. prefix is the template's field path
// in the document ("" for a template, "instanceTemplate." in a group).
func (h *handler) checkOfferingShapes(ctx context.Context, w http.ResponseWriter, t *domain.InstanceTemplate, prefix string) error {
	offerings := templateOfferings(t)
	if len(offerings) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, cloudshapes.Timeout)
	defer cancel()
	target := cloudshapes.Target{Provider: t.Provider, Account: t.Account, Region: t.Region}
	if target.Region == "" {
		// Lifecycle creates the VMs in the account's first region then.
		target.Region = h.accountRegion(t.Account)
	}
	errs, unchecked := cloudshapes.Check(ctx, h.shapes, target, offerings)
	if unchecked != nil {
		h.log.WarnContext(ctx, "template offerings written unchecked", "template", t.Name, "why", unchecked.Error())
		addWarning(w, cloudshapes.Warning(unchecked))
		return nil
	}
	return shapeErrors(prefix, errs)
}

// shapeErrors is a 422 naming the first offending field in details.field
// and every problem in details.errors (nil without errors).
func shapeErrors(prefix string, errs []cloudspec.FieldError) error {
	if len(errs) == 0 {
		return nil
	}
	fe := make(restapi.FieldErrors, len(errs))
	for i, e := range errs {
		fe[i] = restapi.FieldError{Field: prefix + e.Path, Message: e.Msg}
	}
	return newError(http.StatusUnprocessableEntity, contract.CodeInvalidArgument, fe.Error()).
		with("field", fe[0].Field).with("errors", []restapi.FieldError(fe))
}

// inlineTemplate is the template a group defines itself (nil when it
// names one of the catalog, whose offerings were checked when written).
func inlineTemplate(g *domain.NodeGroup) *domain.InstanceTemplate {
	if g == nil || g.InstanceTemplate == nil || g.InstanceTemplate.Provider == "" {
		return nil
	}
	return g.InstanceTemplate
}

// templateOfferings are a template record's offerings, as written.
func templateOfferings(t *domain.InstanceTemplate) []cloudspec.Offering {
	if t == nil || len(t.Offerings) == 0 {
		return nil
	}
	out := make([]cloudspec.Offering, len(t.Offerings))
	for i, o := range t.Offerings {
		out[i] = cloudspec.Offering{Zone: o.Zone, SubnetID: o.SubnetID, InstanceType: o.InstanceType, CapacityType: o.CapacityType}
	}
	return out
}

// accountRegion is the first region of a catalog account ("" if none).
func (h *handler) accountRegion(account string) string {
	if h.svc == nil {
		return ""
	}
	if v, ok := h.svc.CatalogEntry(app.KindAccounts, account); ok && v.Entry != nil && v.Entry.Account != nil && len(v.Entry.Account.Regions) > 0 {
		return v.Entry.Account.Regions[0]
	}
	return ""
}
