/**
 * The dashboard's only script: progressive touches on server-rendered pages (everything works without it).
 * - `[data-copy]` buttons copy the text of the element whose id they name.
 * - forms with `data-confirm` ask before they submit.
 * - `[data-autosubmit]` selects submit their form when changed.
 */

function copyFrom(button: HTMLElement): void {
  const target = document.getElementById(button.dataset.copy ?? '');
  if (!target) return;
  const text = target instanceof HTMLInputElement || target instanceof HTMLTextAreaElement ? target.value : (target.textContent ?? '');
  const done = (label: string) => {
    const before = button.dataset.label ?? button.textContent ?? 'Copy';
    button.dataset.label = before;
    button.textContent = label;
    setTimeout(() => (button.textContent = before), 1500);
  };
  navigator.clipboard?.writeText(text).then(
    () => done('Copied'),
    () => {
      // No clipboard permission (plain http, say): select the text so the user can copy it.
      const range = document.createRange();
      range.selectNodeContents(target);
      const selection = window.getSelection();
      selection?.removeAllRanges();
      selection?.addRange(range);
      done('Selected');
    },
  );
}

document.addEventListener('click', (event) => {
  const button = (event.target as Element | null)?.closest<HTMLElement>('[data-copy]');
  if (button) {
    event.preventDefault();
    copyFrom(button);
  }
});

document.addEventListener('submit', (event) => {
  const form = event.target as HTMLFormElement;
  const question = form.dataset.confirm;
  if (question && !window.confirm(question)) event.preventDefault();
});

document.addEventListener('change', (event) => {
  const field = event.target as HTMLElement;
  if (field instanceof HTMLSelectElement && field.dataset.autosubmit !== undefined) field.form?.requestSubmit();
});
