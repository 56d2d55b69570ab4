"""Stage 3: which fake inputs to feed a model, and at what shape.

The planner reads the model's ``forward`` signature and its config — never a
per-architecture table — and synthesises one tensor per input the forward
needs: its main input (``main_input_name`` when the forward takes it), the
required arguments, and the companions a kind of model cannot run without
(the image of a vision-language model, the grid of a Qwen-style vision
tower, the decoder tokens of an encoder-decoder).

Shapes come from the config where it says one (image size and channels,
mel bins, context length, patch grid, ...).  Where it does not, we use
documented defaults:

* text: ``DEFAULT_SEQ_LEN_DECODER = 2048`` tokens for models that generate
  text (a common fine-tuning length) and ``DEFAULT_SEQ_LEN_ENCODER = 512``
  for encoders (BERT's pre-training length), each capped by the model's own
  position limit (``max_position_embeddings`` and kin);
  ``DEFAULT_SEQ_LEN_STEPWISE = 32`` for recurrent models whose reference
  PyTorch code steps through the sequence one token at a time in Python
  (see :func:`stepwise_recurrent`: Mamba, Jamba, Zamba, RWKV), whose trace
  costs every op once per token; their layers are the same at any length;
* images: the config's ``image_size``, else ``DEFAULT_IMAGE_SIZE = 224``;
  video: ``num_frames`` from the config, else ``DEFAULT_VIDEO_FRAMES = 16``;
* raw audio (``input_values``): ``DEFAULT_AUDIO_SAMPLES = 16000`` (one second
  at 16 kHz); audio features (``input_features``): the mel bins of the config
  by ``2 * max_source_positions`` frames when the config has them (Whisper:
  80 x 3000, 30 s), else ``DEFAULT_AUDIO_FRAMES = 1000`` (10 s at a 10 ms hop);
* time series: ``context_length`` (+ the largest lag) steps from the config;
* a vision-language model gets one image per sample; its text holds exactly
  as many image tokens as the model makes image features (counted by calling
  the model's own ``get_image_features`` on the fake image, see
  :meth:`InputPlan.resolve`), and the text is lengthened if they do not fit.

* a decoder that generates text is "decoding" when its class says so
  (``...ForCausalLM``/``ForConditionalGeneration``), its config is a decoder
  or encoder-decoder, or it has a text sub-config; encoder-decoders get
  decoder tokens as long as the text, capped by the decoder's positions.

Token ids avoid every special id the config names (pad, bos, eos, image...),
and are drawn from a fixed-seed generator.  A training step is traced with
``use_cache=False``.  Where a layout cannot be told from the config (audio
features bins- or frames-first, raw audio with or without a channel axis, one
image or a pair, integer or float boxes) the plan carries
:class:`Alternative` layouts, tried in order when the first one fails.

``--seq-len``, ``--image-size``, ``--batch`` and ``--input-shape`` override;
the report always prints what was used (``InputPlan.how``).

Where each job lives: :mod:`.types` (the plan: :class:`TensorSpec`,
:class:`TokenRun`, :class:`Alternative`, :class:`InputPlan`), :mod:`.planner`
(:func:`plan_inputs` and its steps), the builders per kind of input
(:mod:`.text`, :mod:`.vision`, :mod:`.audio`, :mod:`.extras`),
:mod:`.features` (counting a multimodal model's features), :mod:`.defaults`.
The options are :class:`neurarch.options.InputOptions`; what the planner reads
from the model and its config comes from :mod:`neurarch.introspect`.
"""

from ..introspect import special_ids
from ..options import InputOptions, parse_shape
from .audio import audio_stride
from .defaults import (
    DEFAULT_AUDIO_FRAMES,
    DEFAULT_AUDIO_SAMPLES,
    DEFAULT_ENCODER_STATES,
    DEFAULT_IMAGE_SIZE,
    DEFAULT_QUERY_TOKENS,
    DEFAULT_SEQ_LEN_DECODER,
    DEFAULT_SEQ_LEN_ENCODER,
    DEFAULT_SEQ_LEN_STEPWISE,
    DEFAULT_TIME_STEPS,
    DEFAULT_VIDEO_FRAMES,
    DEFAULT_VISUAL_REGIONS,
    SEED,
)
from .planner import plan_inputs
from .text import stepwise_recurrent
from .types import MODALITY_CODES, Alternative, InputPlan, TensorSpec, TokenRun

__all__ = [
    "DEFAULT_AUDIO_FRAMES",
    "DEFAULT_AUDIO_SAMPLES",
    "DEFAULT_ENCODER_STATES",
    "DEFAULT_IMAGE_SIZE",
    "DEFAULT_QUERY_TOKENS",
    "DEFAULT_SEQ_LEN_DECODER",
    "DEFAULT_SEQ_LEN_ENCODER",
    "DEFAULT_SEQ_LEN_STEPWISE",
    "DEFAULT_TIME_STEPS",
    "DEFAULT_VIDEO_FRAMES",
    "DEFAULT_VISUAL_REGIONS",
    "MODALITY_CODES",
    "SEED",
    "Alternative",
    "InputOptions",
    "InputPlan",
    "TensorSpec",
    "TokenRun",
    "audio_stride",
    "parse_shape",
    "plan_inputs",
    "special_ids",
    "stepwise_recurrent",
]
