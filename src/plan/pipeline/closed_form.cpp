#include "plan/pipeline/closed_form.h"

namespace tessera::plan {

std::optional<ClosedFormBubble> closed_form_bubble(const pipeline::Schedule& s, double forward, double backward,
                                                   double weight) {
  using pipeline::ScheduleKind;
  const double p = s.ranks, m = s.microbatches, v = s.chunks;
  switch (s.kind) {
    case ScheduleKind::GPipe:
    case ScheduleKind::OneFOneB:
      // Total time (m + p - 1)(t_f + t_b) for any m, of which m (t_f + t_b) is work.
      return ClosedFormBubble{(p - 1) / (m + p - 1), "(p-1)/(m+p-1)"};
    case ScheduleKind::Interleaved:
      // The fill and drain shrink to (p - 1)(t_f + t_b) / v: bubble / work = (p - 1) / (v m).
      return ClosedFormBubble{(p - 1) / (v * m + p - 1), "(p-1)/(v*m+p-1)"};
    case ScheduleKind::PipeDream2BW: {
      // One fill and one drain for all steps * m microbatches.
      const double n = m * s.steps;
      return ClosedFormBubble{(p - 1) / (n + p - 1), "(p-1)/(steps*m+p-1)"};
    }
    case ScheduleKind::ZeroBubbleH1: {
      // Qi et al.: each rank idles (p - 1)(t_F + t_B - t_W), where t_B = backward - weight is the
      // input-gradient part. Derived for m >= p and t_W <= t_F; otherwise no closed form here.
      const double t_b = backward - weight, t_w = weight;
      if (m < p || t_w > forward || t_w > t_b) return std::nullopt;
      const double idle = (p - 1) * (forward + t_b - t_w);
      return ClosedFormBubble{idle / (m * (forward + backward) + idle), "(p-1)(t_f+t_b-t_w)/total"};
    }
  }
  return std::nullopt;
}

}  // namespace tessera::plan
