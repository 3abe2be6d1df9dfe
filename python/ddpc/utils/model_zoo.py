"""ddpc.utils.model_zoo: ``load_url``, torch.utils.model_zoo's name for
ddpc.hub.load_state_dict_from_url."""

from ..hub import load_state_dict_from_url as load_url

__all__ = ["load_url"]
