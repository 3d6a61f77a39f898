package tfprovider

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/attr/xattr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/types/basetypes"
	"github.com/hashicorp/terraform-plugin-go/tftypes"
)

// durationType is the type of the duration attributes (ttl, max_ttl,
// keep_for): a Go duration's text, such as "90s" or "1h30m", two texts of
// the same duration ("10m", "600s") being semantically equal. It is
// timetypes.GoDurationType's contract with a refusal of its own: that
// type's detail for a text that is no duration prints a literal "\n\n" (a
// raw string where an escape was meant), and names no attribute.
type durationType struct{ basetypes.StringType }

var (
	_ basetypes.StringTypable                    = durationType{}
	_ basetypes.StringValuableWithSemanticEquals = duration{}
	_ xattr.ValidateableAttribute                = duration{}
)

func (durationType) String() string { return "tfprovider.durationType" }

// ValueType is a duration.
func (durationType) ValueType(context.Context) attr.Value { return duration{} }

// Equal reports whether o is a durationType.
func (durationType) Equal(o attr.Type) bool {
	_, ok := o.(durationType)
	return ok
}

// ValueFromString is in as a duration; whether it is one is checked by
// duration.ValidateAttribute, which names the attribute.
func (durationType) ValueFromString(_ context.Context, in basetypes.StringValue) (basetypes.StringValuable, diag.Diagnostics) {
	return duration{StringValue: in}, nil
}

// ValueFromTerraform is the string in as a duration.
func (t durationType) ValueFromTerraform(ctx context.Context, in tftypes.Value) (attr.Value, error) {
	v, err := t.StringType.ValueFromTerraform(ctx, in)
	if err != nil {
		return nil, err
	}
	s, ok := v.(basetypes.StringValue)
	if !ok {
		return nil, fmt.Errorf("a duration from a %T, not a string", v)
	}
	return duration{StringValue: s}, nil
}

// duration is a value of durationType.
type duration struct{ basetypes.StringValue }

// Type is durationType.
func (duration) Type(context.Context) attr.Type { return durationType{} }

// Equal reports whether o is a duration of the same text.
func (d duration) Equal(o attr.Value) bool {
	other, ok := o.(duration)
	return ok && d.StringValue.Equal(other.StringValue)
}

// ValidateAttribute refuses a text that is no Go duration, naming the
// attribute and saying what a duration looks like.
func (d duration) ValidateAttribute(_ context.Context, req xattr.ValidateAttributeRequest, resp *xattr.ValidateAttributeResponse) {
	if d.IsNull() || d.IsUnknown() {
		return
	}
	if _, err := time.ParseDuration(d.ValueString()); err != nil {
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid "+req.Path.String(),
			fmt.Sprintf("%s must be a Go duration: numbers, each with a unit (ns, us, ms, s, m, h), such as 90s, 10m or 1h30m; %q is not.",
				req.Path, d.ValueString()))
	}
}

// StringSemanticEquals reports whether two durations are the same length
// of time, however spelled.
func (d duration) StringSemanticEquals(_ context.Context, nv basetypes.StringValuable) (bool, diag.Diagnostics) {
	var diags diag.Diagnostics
	other, ok := nv.(duration)
	if !ok {
		diags.AddError("Semantic equality check error", fmt.Sprintf("a duration compared with a %T", nv))
		return false, diags
	}
	a, errA := time.ParseDuration(d.ValueString())
	b, errB := time.ParseDuration(other.ValueString())
	return errA == nil && errB == nil && a == b, diags
}

// ValueGoDuration is d as a time.Duration; an error for a null, unknown
// or unparsable text.
func (d duration) ValueGoDuration() (time.Duration, diag.Diagnostics) {
	var diags diag.Diagnostics
	if d.IsNull() || d.IsUnknown() {
		diags.AddError("Duration error", "the duration is null or unknown")
		return 0, diags
	}
	v, err := time.ParseDuration(d.ValueString())
	if err != nil {
		diags.AddError("Duration error", err.Error())
	}
	return v, diags
}

// durationText is s as a duration value (s a duration's text).
func durationText(s string) duration { return duration{StringValue: basetypes.NewStringValue(s)} }

// nullDuration is a null duration value.
func nullDuration() duration { return duration{StringValue: basetypes.NewStringNull()} }
