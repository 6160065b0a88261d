//! The layout a person sees on opening a recording: the world and the camera on the
//! left, actions and the world model's error in the middle, learning on the right.

use rerun::blueprint::components::{PanelState, PlayState};
use rerun::blueprint::{
    BarChartView, Blueprint, BlueprintPanel, Horizontal, SelectionPanel, Spatial2DView, Tabs,
    TextDocumentView, TextLogView, TimePanel, TimeSeriesView, Vertical,
};

use super::paths::*;

/// The default blueprint sent at the start of every recording: the views above, the
/// side panels collapsed and the time panel on the control-step timeline, following
/// the newest data (a saved recording opens at its end).
pub(super) fn default_blueprint() -> Blueprint {
    let world =
        Spatial2DView::new("world (end effector, targets, imagined vs real)").with_origin("/world");
    let camera = Spatial2DView::new("camera").with_origin("/camera");
    let instruction = TextDocumentView::new("instruction").with_origin(format!("/{INSTRUCTION}"));
    let events = TextLogView::new("events").with_origin(format!("/{EVENTS}"));
    let actions = TimeSeriesView::new("action: intended vs executed").with_origin("/action");
    // Every horizon is logged; the view shows the first and the default longest (8)
    // so that the error, the spread and the bound can be told apart at a glance.
    let rollout = TimeSeriesView::new("rollout error vs calibrated bound, h=1 and h=8")
        .with_origin("/worldmodel")
        .with_contents(
            [ROLLOUT_ERROR, DISAGREEMENT, INTERVAL]
                .iter()
                .flat_map(|path| [format!("/{path}/h1"), format!("/{path}/h8")]),
        );
    let control = TimeSeriesView::new("control").with_origin("/control");
    let episodes = TimeSeriesView::new("episodes").with_origin("/episode");
    // Counts (transitions weighted, eligible) would flatten the losses and rates; the
    // view shows the series a person checks first, every other stays one click away.
    let learner = TimeSeriesView::new("learner")
        .with_origin(format!("/{LEARNER}"))
        .with_contents(
            [
                "update/last_loss",
                "world_model_prediction_loss",
                "critic/value",
                "rollout_success_rate",
                "advantages/ess_fraction",
                "update/importance_ess_fraction",
            ]
            .map(|name| format!("/{LEARNER}/{name}")),
        );
    let training = TimeSeriesView::new("training losses").with_origin(format!("/{TRAIN}"));
    let evaluation = TimeSeriesView::new("evaluation").with_origin(format!("/{EVAL}"));
    let promotion = TimeSeriesView::new("promotion").with_origin(format!("/{PROMOTION}"));
    let advantages = BarChartView::new("advantages").with_origin(format!("/{ADVANTAGES}"));
    let weights = BarChartView::new("AWR weights").with_origin(format!("/{WEIGHTS}"));
    let horizon_error =
        BarChartView::new("error per horizon").with_origin(format!("/{EVAL_HORIZON_ERROR}"));
    Blueprint::new(Horizontal::new([
        Vertical::new([
            world.into(),
            Horizontal::new([
                camera.into(),
                Vertical::new([instruction.into(), events.into()]).into(),
            ])
            .into(),
        ])
        .with_row_shares([3.0, 2.0])
        .into(),
        Vertical::new([actions.into(), rollout.into(), control.into()]).into(),
        Tabs::new([
            learner.into(),
            training.into(),
            episodes.into(),
            evaluation.into(),
            promotion.into(),
            advantages.into(),
            weights.into(),
            horizon_error.into(),
        ])
        .into(),
    ]))
    .with_blueprint_panel(BlueprintPanel::from_state(PanelState::Collapsed))
    .with_selection_panel(SelectionPanel::from_state(PanelState::Collapsed))
    .with_time_panel(
        TimePanel::new()
            .with_timeline(CONTROL_STEP)
            .with_play_state(PlayState::Following),
    )
}
