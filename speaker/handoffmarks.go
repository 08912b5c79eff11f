package speaker

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/speaker/handoff"
)

// HandoffMarksCondition is the Speaker's HandoffMarks condition for the check of the hand-off's
// bits against the node's other rules (handoff.CheckMarks), or for the error that kept them
// from being read (readErr) or the hand-off from starting (openErr).
func HandoffMarksCondition(cfg handoff.Config, check handoff.MarkCheck, readErr, openErr error) metav1.Condition {
	c := metav1.Condition{Type: v1alpha1.ConditionHandoffMarks, Status: metav1.ConditionFalse}
	switch {
	case readErr != nil:
		c.Reason, c.Message = v1alpha1.ReasonMarksUnreadable, "reading the node's rules that use marks: "+readErr.Error()+": no connection is handed off when an address moves"
		return c
	case openErr != nil:
		c.Reason, c.Message = v1alpha1.ReasonHandoffFailed, check.Message(cfg)+"; but the hand-off could not start: "+openErr.Error()
		return c
	case !check.Handoff:
		c.Reason = v1alpha1.ReasonHandoffMarkInUse
	case cfg.SlotMask == 0:
		c.Reason = v1alpha1.ReasonNoSlotMarks
	case !check.Flows:
		c.Reason = v1alpha1.ReasonSlotMarksInUse
	default:
		c.Status, c.Reason = metav1.ConditionTrue, v1alpha1.ReasonMarksFree
	}
	c.Message = check.Message(cfg)
	return c
}
