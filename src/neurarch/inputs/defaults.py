"""The input planner's defaults, where a config does not say (the rules are in :mod:`neurarch.inputs`)."""

DEFAULT_SEQ_LEN_DECODER = 2048
DEFAULT_SEQ_LEN_ENCODER = 512
DEFAULT_SEQ_LEN_STEPWISE = 32
DEFAULT_IMAGE_SIZE = 224
DEFAULT_VIDEO_FRAMES = 16
DEFAULT_AUDIO_SAMPLES = 16_000  # one second at 16 kHz
DEFAULT_AUDIO_FRAMES = 1000  # ten seconds of 10 ms feature frames
DEFAULT_QUERY_TOKENS = 32  # a Q-Former prompt
DEFAULT_TIME_STEPS = 512
DEFAULT_ENCODER_STATES = 257  # states a lone cross-attending tower attends to: (224 / 14)^2 patches + [CLS]
DEFAULT_VISUAL_REGIONS = 36  # detector boxes per image fed to region-feature models (LXMERT's 36)
SEED = 0  # token ids are drawn from a fixed generator: runs are reproducible
