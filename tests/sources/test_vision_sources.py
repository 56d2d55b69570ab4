"""``timm:NAME`` and ``torchvision:NAME`` sources.

Run in the vision environment (``pytest -m vision`` in .venv-vision); every
test that needs timm/torchvision skips cleanly without them.  Expected figures
are published ones (torchvision's documented ``num_params`` per weight, timm's
model cards) or worked out by hand beside the value — never read back from
neurarch.
"""

import sys

import pytest

from neurarch import analyze
from neurarch.build import build
from neurarch.errors import NeurarchError, SourceNotFoundError
from neurarch.sources import resolve


@pytest.fixture
def torchvision():
    return pytest.importorskip("torchvision")


@pytest.fixture
def timm():
    return pytest.importorskip("timm")


def _params(spec: str) -> int:
    """Unique parameter scalars of the meta build (tied ones once)."""
    model = build(resolve(spec)).model
    return sum({id(p): p.numel() for p in model.parameters()}.values())


# --- torchvision ------------------------------------------------------------

# ResNet-50 BatchNorm channels, by hand: stem 64; a bottleneck of width w has
# bn1 w + bn2 w + bn3 4w = 6w, with 3/4/6/3 blocks of w = 64/128/256/512:
# 6*(64*3 + 128*4 + 256*6 + 512*3) = 6*3776 = 22,656; each stage's downsample
# BN has 4w: 4*(64+128+256+512) = 3,840.  Total 64 + 22,656 + 3,840 = 26,560
# channels, each with running_mean and running_var -> 53,120 buffer scalars;
# 1 + 16*3 + 4 = 53 BatchNorm layers -> 53 num_batches_tracked counters.
RESNET50_PARAMS = 25_557_032  # torchvision docs, ResNet50_Weights num_params
RESNET50_BN_BUFFERS = 2 * (64 + 6 * (64 * 3 + 128 * 4 + 256 * 6 + 512 * 3) + 4 * (64 + 128 + 256 + 512))
RESNET50_BN_LAYERS = 1 + 16 * 3 + 4


@pytest.mark.vision
def test_torchvision_resnet50_end_to_end(torchvision):
    report = analyze("torchvision:resnet50")
    assert report.model.source == "torchvision"
    assert report.model.model_class == "ResNet"
    assert report.model.library.startswith("torchvision ")
    assert report.forward_pass.ok, report.forward_pass.error
    assert report.backward_pass.ok, report.backward_pass.error
    assert report.params.parameters == RESNET50_PARAMS
    assert report.params.buffers == RESNET50_BN_BUFFERS == 53_120
    assert report.params.counters == RESNET50_BN_LAYERS == 53
    assert report.params.checkpoint is None  # no weights are read
    # ResNet50_Weights.IMAGENET1K_V2 documents crop_size=224.
    assert report.input.shape == [1, 3, 224, 224]
    # Stem: 7x7 stride-2 conv 224 -> 112, BN, ReLU, 3x3 stride-2 max-pool 112 -> 56.
    first = [(n.type, n.output_shape) for n in report.structure.nodes[:4]]
    assert first == [
        ("Conv2D", [64, 112, 112]),
        ("BatchNorm", [64, 112, 112]),
        ("ReLU", [64, 112, 112]),
        ("MaxPool2D", [64, 56, 56]),
    ]
    last = report.structure.nodes[-1]
    assert (last.type, last.output_shape, last.parameters) == ("Linear", [1000], 2048 * 1000 + 1000)


# num_params documented by torchvision for each model's default weights
# (docs tables, "Params" column, and WeightsEnum.meta["num_params"]).
PUBLISHED = {
    "resnet18": 11_689_512,
    "mobilenet_v2": 3_504_872,
    "efficientnet_b0": 5_288_548,
    "vit_b_16": 86_567_656,
    "swin_t": 28_288_354,
    "convnext_tiny": 28_589_128,
    # sizes computed with torch.arange(...).tolist(): the CPU-default fallback
    "regnet_y_400mf": 4_344_144,
    # COCO weights: frozen BatchNorm in the backbone (its affine terms are buffers)
    "fasterrcnn_resnet50_fpn": 41_755_286,
    # COCO_WITH_VOC_LABELS weights: 21 classes plus the auxiliary FCN head
    "deeplabv3_resnet50": 42_004_074,
    # SWAG weights: 518x518 images, so a 37*37+1 position embedding
    "vit_h_14": 633_470_440,
    "googlenet": 6_624_904,  # weights drop the two auxiliary classifiers
}


@pytest.mark.vision
@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_torchvision_counts_match_published(torchvision, name):
    meta = torchvision.models.get_model_weights(name).DEFAULT.meta
    assert meta["num_params"] == PUBLISHED[name]  # the installed torchvision agrees with its docs
    assert _params(f"torchvision:{name}") == PUBLISHED[name]


@pytest.mark.vision
@pytest.mark.parametrize(
    "name, shape",
    [
        ("resnet50", (3, 224, 224)),  # ImageClassification crop_size=224
        ("inception_v3", (3, 299, 299)),  # crop_size=299
        ("vit_h_14", (3, 518, 518)),  # SWAG E2E weights: crop_size=518
        ("deeplabv3_resnet50", (3, 520, 520)),  # SemanticSegmentation resize_size=520
        ("r3d_18", (3, 16, 112, 112)),  # VideoClassification crop 112, clip_len=16 in the docs
    ],
)
def test_torchvision_default_input_shape(torchvision, name, shape):
    assert resolve(f"torchvision:{name}").default_input_shape == shape


@pytest.mark.vision
def test_torchvision_builds_on_meta_with_fallback_note(torchvision):
    built = build(resolve("torchvision:regnet_y_400mf"))
    assert {t.device.type for t in [*built.model.parameters(), *built.model.buffers()]} == {"meta"}
    assert any("moved to meta" in n for n in built.notes)


@pytest.mark.vision
def test_torchvision_unknown_name_lists_close_matches(torchvision):
    with pytest.raises(SourceNotFoundError, match=r"torchvision .*has no model 'resnet51'.*close matches: .*resnet50"):
        resolve("torchvision:resnet51")


# --- timm -------------------------------------------------------------------

# vit_small_patch14_dinov2 (embed 384, depth 12, MLP 1536, patch 14, 518 px,
# no classifier head), by hand:
#   patch_embed  3*14*14*384 + 384                        =    226,176
#   cls_token    384;  pos_embed (37*37 + 1) * 384          =    526,464
#   per block: norm1 768, qkv 384*1152 + 1152 = 443,520, proj 384*384 + 384
#              = 147,840, ls1 384, norm2 768, fc1 384*1536 + 1536 = 591,360,
#              fc2 1536*384 + 384 = 590,208, ls2 384       =  1,775,232
#   12 blocks                                              = 21,302,784
#   final norm                                             =        768
DINOV2_S = 226_176 + 384 + (37 * 37 + 1) * 384 + 12 * (768 + 443_520 + 147_840 + 384 + 768 + 591_360 + 590_208 + 384) + 768


@pytest.mark.vision
def test_timm_resnet50_end_to_end(timm):
    report = analyze("timm:resnet50")
    assert report.model.source == "timm"
    assert report.model.library == f"timm {timm.__version__}"
    assert report.forward_pass.ok, report.forward_pass.error
    assert report.params.parameters == RESNET50_PARAMS  # timm model card: same 25.6 M ResNet-50
    assert report.params.buffers == RESNET50_BN_BUFFERS
    assert report.input.shape == [1, 3, 224, 224]  # resnet50.a1_in1k pretrained_cfg input_size
    assert [n.output_shape for n in report.structure.nodes[:4]] == [[64, 112, 112]] * 3 + [[64, 56, 56]]


@pytest.mark.vision
def test_timm_dinov2_small(timm):
    report = analyze("timm:vit_small_patch14_dinov2")
    assert report.forward_pass.ok, report.forward_pass.error
    assert report.params.parameters == DINOV2_S == 22_056_192
    # DINOv2 is published at 518 px: 518 / 14 = 37 patches a side.
    assert report.input.shape == [1, 3, 518, 518]
    first = report.structure.nodes[0]
    assert (first.type, first.output_shape) == ("Patch Embed", [37 * 37, 384])
    assert report.structure.nodes[-1].output_shape == [37 * 37 + 1, 384]  # + the class token


@pytest.mark.vision
def test_timm_tag_sets_input_size(timm):
    # resnet50.a1h_in1k is trained at 176 px (its timm model card).
    assert resolve("timm:resnet50.a1h_in1k").default_input_shape == (3, 176, 176)


@pytest.mark.vision
def test_timm_unknown_name_and_tag(timm):
    with pytest.raises(SourceNotFoundError, match=r"timm .*has no model 'vit_smal_patch16_224'.*vit_small_patch16_224"):
        resolve("timm:vit_smal_patch16_224")
    with pytest.raises(SourceNotFoundError, match=r"no pretrained tag 'a1_in1kk' for resnet50.*a1_in1k"):
        resolve("timm:resnet50.a1_in1kk")


# --- no timm/torchvision needed ---------------------------------------------


@pytest.mark.parametrize("spec", ["timm:", "torchvision: ", "timm:hf-hub:timm/resnet50.a1_in1k"])
def test_bad_specs(spec):
    with pytest.raises(SourceNotFoundError):
        resolve(spec)


@pytest.mark.parametrize("library", ["timm", "torchvision"])
def test_library_missing_says_install(monkeypatch, library):
    monkeypatch.setitem(sys.modules, library, None)  # makes `import <library>` fail
    with pytest.raises(NeurarchError, match=r"install the vision extra: pip install torch==2\.14\.1 torchvision==0\.29\.1"):
        resolve(f"{library}:resnet50")
